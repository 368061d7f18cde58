import NotifyNATS
import NotifyWire

/// What a bridge connects and which names it carries, from the command line and a configuration file.
package struct BridgeConfiguration: Sendable, Equatable {
    /// The local daemon's socket; nil: the library's default.
    package var socketPath: String?
    /// NATS servers, tried in order (plus those the cluster announces).
    package var natsURLs: [String] = []
    /// Local patterns whose notifications are published to NATS.
    package var exports: [String] = []
    /// Patterns whose NATS messages are posted locally.
    package var imports: [String] = []
    /// The subject prefix names are published under.
    package var subjectPrefix = "notifyd"
    /// This host's identity in the origin headers; nil: `/etc/machine-id`.
    package var hostID: String?
    /// How many notifications the daemon may hold for the bridge per export before dropping the oldest.
    package var queueLimit: UInt32 = 65_536
    /// Bytes of exported notifications kept while NATS is unreachable; past that they are dropped and counted.
    package var maxPendingBytes = 8 << 20
    /// A JetStream key-value bucket for state values and retained notifications (not supported yet).
    package var kvBucket: String?

    package init() {}

    /// Checks everything that can be checked without connecting: URLs, patterns, the prefix.
    ///
    /// - Throws: the first problem, naming the offending value.
    package func validate() throws(BridgeConfigurationError) {
        if natsURLs.isEmpty { throw .missing("at least one --nats URL") }
        if exports.isEmpty && imports.isEmpty { throw .missing("at least one --export or --import pattern") }
        for url in natsURLs {
            do { _ = try NATSServerAddress(url: url) } catch { throw .invalidURL(url, error.description) }
        }
        for pattern in exports + imports {
            do { _ = try NotificationPattern(pattern) } catch { throw .invalidPattern(pattern, error.description) }
            if pattern.hasPrefix("self.") { throw .invalidPattern(pattern, "self. names never leave their process") }
        }
        _ = try SubjectMapping(prefix: subjectPrefix)
        if queueLimit == 0 { throw .invalidValue("queue-limit", "0") }
        if let hostID, hostID.isEmpty || hostID.utf8.count > 255 || hostID.unicodeScalars.contains(where: {
            $0.properties.isWhitespace || $0.properties.generalCategory == .control
        }) {
            throw .invalidValue("host-id (1 to 255 bytes, no spaces or control characters)", hostID)
        }
        // JetStream's stream names: the bucket is the stream KV_NAME.
        if let kvBucket, kvBucket.isEmpty || !kvBucket.utf8.allSatisfy({ byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }) {
            throw .invalidValue("kv-bucket", kvBucket)
        }
    }

    /// Applies a configuration file: one directive per line (`socket PATH`, `nats URL`, `export PATTERN`,
    /// `import PATTERN`, `subject-prefix PREFIX`, `host-id ID`, `queue-limit N`, `max-pending-bytes N`,
    /// `kv-bucket NAME`), `#` comments and blank lines ignored. Lists add to what is already there.
    ///
    /// - Throws: ``BridgeConfigurationError/syntax(line:_:)`` naming the line.
    package mutating func apply(file text: String) throws(BridgeConfigurationError) {
        // Split on Unicode scalars, not Characters: a Character can span a separator ("\r\n", or a prepended
        // concatenation mark such as U+06DD with the space after it). A "\r" before the "\n" is white space.
        let lines = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, rawLine) in lines.enumerated() {
            let line = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? rawLine[...]
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
                .map { String(String.UnicodeScalarView($0)) }
            guard let directive = words.first else { continue }
            guard words.count == 2 else {
                throw .syntax(line: index + 1, "'\(directive)' takes exactly one value")
            }
            let value = words[1]
            switch directive {
            case "socket": socketPath = value
            case "nats": natsURLs.append(value)
            case "export": exports.append(value)
            case "import": imports.append(value)
            case "subject-prefix": subjectPrefix = value
            case "host-id": hostID = value
            case "kv-bucket": kvBucket = value
            case "queue-limit":
                guard let number = UInt32(value) else { throw .syntax(line: index + 1, "queue-limit needs a number") }
                queueLimit = number
            case "max-pending-bytes":
                guard let number = Int(value), number >= 0 else {
                    throw .syntax(line: index + 1, "max-pending-bytes needs a number")
                }
                maxPendingBytes = number
            default:
                throw .syntax(line: index + 1, "unknown directive '\(directive)'")
            }
        }
    }
}

/// A configuration the bridge cannot start with.
package enum BridgeConfigurationError: Error, Equatable, CustomStringConvertible {
    case missing(String)
    case invalidURL(String, String)
    case invalidPattern(String, String)
    case invalidPrefix(String)
    case invalidValue(String, String)
    case syntax(line: Int, String)

    package var description: String {
        switch self {
        case .missing(let what): "missing \(what)"
        case .invalidURL(let url, let why): "invalid NATS URL '\(url)': \(why)"
        case .invalidPattern(let pattern, let why): "invalid pattern '\(pattern)': \(why)"
        case .invalidPrefix(let prefix): "invalid subject prefix '\(prefix)' (a NATS subject without wildcards)"
        case .invalidValue(let name, let value): "invalid \(name) '\(value)'"
        case .syntax(let line, let why): "configuration line \(line): \(why)"
        }
    }
}
