// Fuzzes the configuration file parser, AccessConfiguration.parse(_:source:) (NotifyServer; compiled here from
// Sources/NotifyServer/AccessConfiguration.swift through a symbolic link, as NotifyServer is not a product).
//
// Input: the file's text (UTF-8; invalid sequences become U+FFFD).
// Properties:
// - parsing never crashes; it returns a configuration or a ConfigurationError whose location is
//   "fuzz.conf:N" with N a line of the input;
// - every rule's prefix is a valid name, its source names a line of the input, and every quota is positive;
// - the configuration written back in canonical form (numeric owner and group) parses to the same rules,
//   quotas and user-names setting;
// - a comment line and a blank line appended after a final "\n" change nothing;
// - CRLF line ends read like LF (the parser read a CRLF file as one line: Tests/Fuzz/crashes/README.md; fixed).
#if canImport(Glibc)
import Glibc
#endif
import ConfigurationUnderTest
import FuzzSupport
import NotifyWire

@main
enum FuzzConfiguration {
    static func main() {
        fuzz(FuzzConfiguration.testOneInput)
    }

    static let source = "fuzz.conf"

    /// A file with CRLF line ends must parse like the same file with LF line ends (FUZZ_CONFIG_CRLF=0 turns the
    /// check off).
    static let checkCRLF = getenv("FUZZ_CONFIG_CRLF").map { String(cString: $0) != "0" } ?? true

    /// The fields that matter, prefixes as bytes (String equality is Unicode-canonical, not byte equality).
    struct Summary: Equatable {
        var rules: [[String]]
        var quotas: AccessConfiguration.Quotas
        var userNamesObserve: AccessConfiguration.Permission

        init(_ configuration: AccessConfiguration) {
            rules = configuration.rules.map {
                [hex($0.prefix.utf8), "\($0.ownerUID)", "\($0.groupGID)", $0.post.rawValue, $0.observe.rawValue]
            }
            quotas = configuration.quotas
            userNamesObserve = configuration.userNamesObserve
        }
    }

    static func lineNumber(_ location: String) -> Int? {
        guard location.hasPrefix(source + ":") else { return nil }
        return Int(location.dropFirst(source.count + 1))
    }

    static func canonicalText(_ configuration: AccessConfiguration) -> String {
        var lines: [String] = ["# written back by FuzzConfiguration"]
        for rule in configuration.rules {
            lines.append(
                "reserve \(rule.prefix) owner=\(rule.ownerUID) group=\(rule.groupGID) post=\(rule.post.rawValue) observe=\(rule.observe.rawValue)")
        }
        let quotas = configuration.quotas
        lines.append("quota connections-per-uid \(quotas.connectionsPerUID)")
        lines.append("quota subscriptions-per-uid \(quotas.subscriptionsPerUID)")
        lines.append("quota pattern-labels-per-uid \(quotas.patternLabelsPerUID)")
        lines.append("quota outbound-bytes-per-uid \(quotas.outboundBytesPerUID)")
        lines.append("quota retained-bytes-per-uid \(quotas.retainedBytesPerUID)")
        lines.append("quota state-names-per-uid \(quotas.stateNamesPerUID)")
        lines.append("user-names observe=\(configuration.userNamesObserve.rawValue)")
        return lines.joined(separator: "\n") + "\n"
    }

    static func testOneInput(_ input: UnsafeRawBufferPointer) {
        let text = String(decoding: input, as: UTF8.self)
        let lineCount = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }).count
        let configuration: AccessConfiguration
        do {
            configuration = try AccessConfiguration.parse(text, source: source)
        } catch {
            _ = error.description
            let line = lineNumber(error.location)
            require(line != nil && line! >= 1 && line! <= lineCount, "error location \(error.location) (\(lineCount) lines)")
            return
        }
        for rule in configuration.rules {
            require(NotificationName.isValid(rule.prefix), "rule prefix \(rule.prefix.debugDescription) is not a valid name")
            let line = lineNumber(rule.source)
            require(line != nil && line! >= 1 && line! <= lineCount, "rule source \(rule.source) (\(lineCount) lines)")
            _ = rule.description
        }
        let quotas = configuration.quotas
        require(
            [quotas.connectionsPerUID, quotas.subscriptionsPerUID, quotas.patternLabelsPerUID, quotas.outboundBytesPerUID,
             quotas.retainedBytesPerUID, quotas.stateNamesPerUID].allSatisfy { $0 > 0 },
            "a quota is not positive: \(quotas)")

        let summary = Summary(configuration)
        let written = canonicalText(configuration)
        do {
            let reparsed = try AccessConfiguration.parse(written, source: source)
            require(Summary(reparsed) == summary, "written back as\n\(written)\nit parses differently: \(reparsed) vs \(configuration)")
        } catch {
            require(false, "written back as\n\(written)\nit does not parse: \(error)")
        }

        if checkCRLF && !text.unicodeScalars.contains("\r") {
            // The parser counts "\r" as white space, so a file with CRLF line ends should read as the same file.
            let crlf = String(text.unicodeScalars.map { $0 == "\n" ? "\r\n" : String($0) }.joined())
            var crlfSummary: Summary?
            var crlfError: ConfigurationError?
            do { crlfSummary = Summary(try AccessConfiguration.parse(crlf, source: source)) } catch { crlfError = error }
            require(crlfSummary == summary, "with CRLF line ends: \(String(describing: crlfSummary)) / \(String(describing: crlfError)), with LF: \(summary)")
        }

        if text.isEmpty || text.hasSuffix("\n") {
            do {
                let extended = try AccessConfiguration.parse(text + "# a comment\n\n", source: source)
                require(Summary(extended) == summary, "a comment line after the text changed the configuration")
            } catch {
                require(false, "a comment line after the text makes it fail: \(error)")
            }
        }
    }
}
