import NotifySystemd
import Testing

@Suite("Journal field names")
struct JournalFieldNameTests {
    @Test("valid names follow the journal's rules")
    func validity() {
        for name in ["MESSAGE", "A", "CODE_LINE", "X9", "A_B_C", String(repeating: "N", count: 64)] {
            #expect(JournalFieldName.isValid(name), "\(name)")
        }
        for name in ["", "_PID", "9LIVES", "lower", "With-Dash", "DOT.TED", "ÄRGER", "SP ACE", String(repeating: "N", count: 65)] {
            #expect(!JournalFieldName.isValid(name), "\(name)")
        }
    }

    @Test("metadata keys map to valid names", arguments: [
        ("pid", "PID"),
        ("uid", "UID"),
        ("connection", "CONNECTION"),
        ("client.name", "CLIENT_NAME"),
        ("daemonRestarted", "DAEMON_RESTARTED"),
        ("senderPID", "SENDER_PID"),
        ("ipv4Address", "IPV4_ADDRESS"),
        ("already_VALID", "ALREADY_VALID"),
        ("_secret", "SECRET"),
        ("__PID", "PID"),
        ("2fa", "F_2FA"),
        ("a--b..c", "A_B_C"),
        ("trailing.", "TRAILING"),
        ("grüße", "GR_E"),
        ("", "FIELD"),
        ("...", "FIELD"),
        ("日本", "FIELD"),
    ])
    func mapping(key: String, expected: String) {
        let name = JournalFieldName.make(from: key)
        #expect(name == expected)
        #expect(JournalFieldName.isValid(name))
    }

    @Test("long keys are cut to 64 characters without a trailing underscore")
    func longKeys() {
        let name = JournalFieldName.make(from: String(repeating: "abc.", count: 40))
        #expect(name.count <= 64)
        #expect(JournalFieldName.isValid(name))
        #expect(!name.hasSuffix("_"))
        #expect(name.hasPrefix("ABC_ABC_"))
    }

    @Test("every mapped name is valid, whatever the key")
    func fuzz() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("aZ09_.- é\u{0}\n\t日_") + ["\u{1F600}"]
        for _ in 0..<2_000 {
            let length = Int.random(in: 0...90, using: &generator)
            let key = String((0..<length).map { _ in alphabet.randomElement(using: &generator)! })
            let name = JournalFieldName.make(from: key)
            #expect(JournalFieldName.isValid(name), "key \(key.debugDescription) → \(name)")
        }
    }

    @Test("unique names get numbered suffixes within 64 characters")
    func uniqueness() {
        var used: Set<String> = ["MESSAGE"]
        #expect(JournalFieldName.unique("MESSAGE", in: &used) == "MESSAGE_2")
        #expect(JournalFieldName.unique("MESSAGE", in: &used) == "MESSAGE_3")
        #expect(JournalFieldName.unique("PID", in: &used) == "PID")
        let long = String(repeating: "L", count: 64)
        #expect(JournalFieldName.unique(long, in: &used) == long)
        let second = JournalFieldName.unique(long, in: &used)
        #expect(second.count == 64)
        #expect(second.hasSuffix("_2"))
        #expect(JournalFieldName.isValid(second))
    }
}
