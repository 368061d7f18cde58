import NotifyWire
import Testing

@Suite("Subscription patterns")
struct NotificationPatternTests {
    /// Valid patterns (PROTOCOL.md § 8.1) and their labels.
    static let validPatterns: [(String, [NotificationPattern.Label])] = [
        ("org.example.battery.low", [.literal("org"), .literal("example"), .literal("battery"), .literal("low")]),
        ("*", [.anyLabel]),
        (">", [.rest]),
        ("a.*.c", [.literal("a"), .anyLabel, .literal("c")]),
        ("org.>", [.literal("org"), .rest]),
        ("org.*.>", [.literal("org"), .anyLabel, .rest]),
        ("*.*", [.anyLabel, .anyLabel]),
        ("*.>", [.anyLabel, .rest]),
        ("org.example.*", [.literal("org"), .literal("example"), .anyLabel]),
        ("日本.*", [.literal("日本"), .anyLabel]),
        // Grammatical; the daemon refuses it for being process-local, not the pattern grammar.
        ("self.>", [.literal("self"), .rest]),
    ]

    @Test("valid patterns parse into labels", arguments: validPatterns)
    func valid(text: String, labels: [NotificationPattern.Label]) throws {
        let pattern = try NotificationPattern(text)
        #expect(pattern.text == text)
        #expect(pattern.description == text)
        #expect(pattern.labels == labels)
        #expect(pattern.hasWildcards == labels.contains { $0 == .anyLabel || $0 == .rest })
    }

    @Test("a pattern of exactly the maximum length")
    func maximumLength() throws {
        let text = String(repeating: "a", count: 253) + ".*"
        #expect(text.utf8.count == 255)
        #expect(try NotificationPattern(text).labels.last == .anyLabel)
        let exact = String(repeating: "é", count: 127) + "a"
        #expect(try !NotificationPattern(exact).hasWildcards)
    }

    /// Invalid patterns and the exact error.
    static let invalidPatterns: [(String, NameError)] = [
        ("", .empty),
        ("org.>.x", .misplacedRest(pattern: "org.>.x")),
        (">.a", .misplacedRest(pattern: ">.a")),
        (">.>", .misplacedRest(pattern: ">.>")),
        ("org.>.*", .misplacedRest(pattern: "org.>.*")),
        ("a*", .invalidCharacter(name: "a*", character: "*")),
        ("org.ex*", .invalidCharacter(name: "org.ex*", character: "*")),
        ("org.**", .invalidCharacter(name: "org.**", character: "*")),
        ("org.>>", .invalidCharacter(name: "org.>>", character: ">")),
        ("org.a>", .invalidCharacter(name: "org.a>", character: ">")),
        ("org.#", .invalidCharacter(name: "org.#", character: "#")),
        ("org.a b.*", .invalidCharacter(name: "org.a b.*", character: " ")),
        ("org..*", .emptyLabel(name: "org..*", index: 1)),
        (".>", .emptyLabel(name: ".>", index: 0)),
        ("org.*.", .emptyLabel(name: "org.*.", index: 2)),
        ("*.", .emptyLabel(name: "*.", index: 1)),
        ("org.>.", .misplacedRest(pattern: "org.>.")),
        (String(repeating: "a", count: 254) + ".*",
         .tooLong(name: String(repeating: "a", count: 254) + ".*", length: 256, limit: 255)),
    ]

    @Test("invalid patterns are rejected with the exact error", arguments: invalidPatterns)
    func invalid(text: String, expected: NameError) {
        #expect(throws: expected) { try NotificationPattern(text) }
    }

    @Test("a daemon's lower max_name_length applies to patterns")
    func customLimit() throws {
        #expect(try NotificationPattern("abc.*", maxLength: 5).text == "abc.*")
        #expect(throws: NameError.tooLong(name: "abcd.*", length: 6, limit: 5)) {
            try NotificationPattern("abcd.*", maxLength: 5)
        }
    }

    @Test("a pattern that names no wildcard is a plain name, and a name is a pattern")
    func namesArePatterns() throws {
        for name in NotificationNameTests.validNames {
            let pattern = try NotificationPattern(name)
            #expect(!pattern.hasWildcards, "\(name)")
            #expect(pattern.matches(name), "\(name)")
            #expect(pattern.literalPrefix == name, "\(name)")
        }
    }

    /// `pattern`, `name`, whether it matches (PROTOCOL.md § 8.1).
    static let matchTable: [(String, String, Bool)] = [
        // `*` is exactly one label, anywhere.
        ("org.*.x", "org.a.x", true),
        ("org.*.x", "org.a.b.x", false),
        ("org.*.x", "org.x", false),
        ("org.*.x", "org.a.y", false),
        ("org.*.x", "net.a.x", false),
        ("org.*.x", "org.a.x.y", false),
        ("*", "a", true),
        ("*", "a.b", false),
        ("*.b", "a.b", true),
        ("*.b", "b", false),
        ("*.*", "a.b", true),
        ("*.*", "a", false),
        ("*.*", "a.b.c", false),
        ("org.*", "org", false),
        ("org.*", "org.a", true),
        ("org.*", "org.a.b", false),
        // `>` is one or more trailing labels.
        ("org.>", "org", false),
        ("org.>", "org.a", true),
        ("org.>", "org.a.b", true),
        ("org.>", "org.a.b.c.d.e", true),
        ("org.>", "orgx.a", false),
        ("org.>", "x.org.a", false),
        ("org.>", "Org.a", false),
        (">", "a", true),
        (">", "a.b", true),
        (">", "org.example.battery.low", true),
        (">", "日本.東京", true),
        ("*.>", "a", false),
        ("*.>", "a.b", true),
        ("a.*.c.>", "a.b.c", false),
        ("a.*.c.>", "a.b.c.d", true),
        ("a.*.c.>", "a.b.c.d.e", true),
        ("a.*.c.>", "a.b.x.d", false),
        // Exact patterns: byte-for-byte equality.
        ("org.example", "org.example", true),
        ("org.example", "org.example.x", false),
        ("org.example", "org", false),
        ("org.example", "org.examplex", false),
        ("org.example", "Org.example", false),
        ("de.beispiel.größe", "de.beispiel.größe", true),
        ("日本.*", "日本.東京", true),
    ]

    @Test("matching", arguments: matchTable)
    func matching(pattern: String, name: String, expected: Bool) throws {
        #expect(try NotificationPattern(pattern).matches(name) == expected)
    }

    @Test("matching agrees with an independent reference over every small pattern and name")
    func exhaustive() throws {
        // Patterns of up to 4 labels from {a, b, *, >} (`>` last only), names of up to 5 labels from {a, b}.
        func sequences(_ alphabet: [String], upTo length: Int) -> [[String]] {
            var result: [[String]] = []
            var current: [[String]] = [[]]
            for _ in 1...length {
                current = current.flatMap { prefix in alphabet.map { prefix + [$0] } }
                result += current
            }
            return result
        }
        let patterns = sequences(["a", "b", "*", ">"], upTo: 4).filter { !$0.dropLast().contains(">") }
        let names = sequences(["a", "b"], upTo: 5)
        func reference(_ pattern: ArraySlice<String>, _ name: ArraySlice<String>) -> Bool {
            guard let first = pattern.first else { return name.isEmpty }
            if first == ">" { return !name.isEmpty }
            guard let label = name.first, first == "*" || first == label else { return false }
            return reference(pattern.dropFirst(), name.dropFirst())
        }
        var matches = 0
        for labels in patterns {
            let pattern = try NotificationPattern(labels.joined(separator: "."))
            for name in names {
                let expected = reference(labels[...], name[...])
                #expect(pattern.matches(name.joined(separator: ".")) == expected, "\(pattern) vs \(name)")
                if expected { matches += 1 }
            }
        }
        #expect(patterns.count == 4 + 12 + 36 + 108)
        #expect(matches > 0)
    }

    @Test("labels are compared byte for byte, without Unicode normalisation (PROTOCOL.md § 8)")
    func noNormalisation() throws {
        let precomposed = "de.beispiel.gr\u{F6}\u{DF}e"  // ö as U+00F6: 19 bytes
        let decomposed = "de.beispiel.gro\u{308}\u{DF}e"  // o + U+0308: 20 bytes, a different name
        #expect(precomposed.utf8.elementsEqual(decomposed.utf8) == false)
        for text in [precomposed, precomposed + ".>", "de.*.gr\u{F6}\u{DF}e"] {
            let pattern = try NotificationPattern(text)
            #expect(pattern.matches(text.hasSuffix(".>") ? precomposed + ".x" : precomposed))
            #expect(!pattern.matches(text.hasSuffix(".>") ? decomposed + ".x" : decomposed), "\(text)")
        }
    }

    @Test("literal prefix: the literal labels before the first wildcard")
    func literalPrefix() throws {
        #expect(try NotificationPattern("org.example.*.x").literalPrefix == "org.example")
        #expect(try NotificationPattern("org.example.>").literalPrefix == "org.example")
        #expect(try NotificationPattern("org.*.example.>").literalPrefix == "org")
        #expect(try NotificationPattern("*.x").literalPrefix == "")
        #expect(try NotificationPattern(">").literalPrefix == "")
        #expect(try NotificationPattern("org.a").literalPrefix == "org.a")
    }

    @Test("process-local patterns are recognised by their text")
    func processLocal() throws {
        #expect(NotificationName.isProcessLocal(try NotificationPattern("self.>").text))
        #expect(NotificationName.isProcessLocal(try NotificationPattern("self.*").text))
        #expect(!NotificationName.isProcessLocal(try NotificationPattern("*.self").text))
        #expect(!NotificationName.isProcessLocal(try NotificationPattern(">").text))
    }

    @Test("the misplaced-rest error names the pattern and the rule")
    func misplacedRestDescription() {
        let message = NameError.misplacedRest(pattern: "org.>.x").description
        #expect(message.contains("'org.>.x'"))
        #expect(message.contains("'>'"))
        #expect(message.contains("last"))
    }
}
