import NotifyNATS
import Testing

@testable import NotifyBridge

@Suite("Bridge configuration, subject mapping and origin headers")
struct BridgeConfigurationTests {
    @Test("a configuration file sets every directive; lists add to the command line's")
    func configurationFile() throws {
        var configuration = BridgeConfiguration()
        configuration.exports = ["cli.>"]
        try configuration.apply(
            file: """
                # the fleet's bridge
                socket /run/notifyd/notifyd.sock
                nats nats://a:4222   # first
                nats nats://b:4222\r
                export org.example.>
                import org.example.config.*
                subject-prefix fleet.notify
                host-id web-1
                queue-limit 1000
                max-pending-bytes 4096

                """)
        #expect(configuration.socketPath == "/run/notifyd/notifyd.sock")
        #expect(configuration.natsURLs == ["nats://a:4222", "nats://b:4222"])
        #expect(configuration.exports == ["cli.>", "org.example.>"])
        #expect(configuration.imports == ["org.example.config.*"])
        #expect(configuration.subjectPrefix == "fleet.notify")
        #expect(configuration.hostID == "web-1")
        #expect(configuration.queueLimit == 1000 && configuration.maxPendingBytes == 4096)
        try configuration.validate()
    }

    @Test("a value ending in a mark that joins the next character (U+06DD) is one word, apart from a comment after it")
    func valueWithPrependedMark() throws {
        var configuration = BridgeConfiguration()
        try configuration.apply(file: "export org.\u{6DD} # the mark and this space are one Character\r\n")
        #expect(configuration.exports == ["org.\u{6DD}"])
    }

    @Test(
        "bad files name the line",
        arguments: [
            ("export\n", BridgeConfigurationError.syntax(line: 1, "'export' takes exactly one value")),
            ("\nexport a b\n", .syntax(line: 2, "'export' takes exactly one value")),
            ("bogus x\n", .syntax(line: 1, "unknown directive 'bogus'")),
            ("queue-limit many\n", .syntax(line: 1, "queue-limit needs a number")),
        ])
    func badFiles(text: String, expected: BridgeConfigurationError) {
        var configuration = BridgeConfiguration()
        #expect(throws: expected) { try configuration.apply(file: text) }
    }

    @Test("validation refuses what cannot work, naming it")
    func validation() {
        func refusal(_ change: (inout BridgeConfiguration) -> Void) -> BridgeConfigurationError? {
            var configuration = BridgeConfiguration()
            configuration.natsURLs = ["nats://127.0.0.1:4222"]
            configuration.exports = ["a.>"]
            change(&configuration)
            do {
                try configuration.validate()
                return nil
            } catch { return error }
        }
        #expect(refusal { _ in } == nil)
        #expect(refusal { $0.natsURLs = [] } == .missing("at least one --nats URL"))
        #expect(refusal { $0.exports = [] } == .missing("at least one --export or --import pattern"))
        #expect(refusal { $0.imports = ["self.>"] } == .invalidPattern("self.>", "self. names never leave their process"))
        if case .invalidPattern("a..b", _) = refusal({ $0.imports = ["a..b"] }) {} else { Issue.record("a..b accepted") }
        if case .invalidURL("tls://x", _) = refusal({ $0.natsURLs = ["tls://x"] }) {} else { Issue.record("tls accepted") }
        #expect(refusal { $0.subjectPrefix = "a.*" } == .invalidPrefix("a.*"))
        #expect(refusal { $0.subjectPrefix = "a b" } == .invalidPrefix("a b"))
        #expect(refusal { $0.queueLimit = 0 } == .invalidValue("queue-limit", "0"))
        #expect(refusal { $0.kvBucket = "fleet-state_1" } == nil)
        #expect(refusal { $0.kvBucket = "a.b" } == .invalidValue("kv-bucket", "a.b"))
        #expect(refusal { $0.kvBucket = "" } == .invalidValue("kv-bucket", ""))
    }

    @Test("names map to PREFIX.NAME and back; subjects outside the prefix map to no name")
    func mapping() throws {
        let mapping = try SubjectMapping(prefix: "fleet")
        #expect(mapping.subject(forName: "org.example.x") == "fleet.org.example.x")
        #expect(mapping.subject(forPattern: "org.*.>") == "fleet.org.*.>")
        #expect(mapping.unvalidatedName(forSubject: "fleet.org.example.x") == "org.example.x")
        #expect(mapping.unvalidatedName(forSubject: "fleet.日本.😀") == "日本.😀")
        for outside in ["other.x", "fleet", "fleet.", "fleetx.a"] {
            #expect(mapping.unvalidatedName(forSubject: outside) == nil, "\(outside)")
        }
        // What is under the prefix but not a name (`fleet.a/b`) is refused when posted: BridgeTests counts it.
    }

    @Test("origin headers round-trip; a message without them has no origin")
    func origin() {
        let origin = Origin(host: "h1", uid: 1000, gid: 100, pid: 42, sequence: 7, retained: true, bridgeSequence: 3)
        #expect(Origin(headers: origin.headers) == origin)
        #expect(Origin(headers: nil) == nil)
        #expect(Origin(headers: NATSHeaders([("Other", "x")])) == nil)
    }
}
