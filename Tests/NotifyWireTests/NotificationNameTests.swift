import NotifyWire
import Testing

@Suite("Name grammar")
struct NotificationNameTests {
    /// The valid examples of PROTOCOL.md § 8, and a few more.
    static let validNames: [String] = [
        "org.example.battery.low",
        "a",
        "128",
        "user.uid.1000.inbox",
        "app:ui@main+v2=1",
        "my-app_2.state",
        "de.beispiel.größe",
        "日本.東京",
        "status.😀",
        "A.Z.a.z.0.9",
        "e\u{301}",  // a combining accent (U+0301) is a scalar above U+00A0
        String(repeating: "a", count: 255),
        "self",  // not the process-local prefix
        "self.cache.flush",  // grammatical; the daemon rejects it for being process-local, not the grammar
    ]

    @Test("valid names", arguments: validNames)
    func valid(name: String) throws {
        try NotificationName.validate(name)
        #expect(NotificationName.isValid(name))
    }

    /// Invalid examples and the exact error the grammar reports.
    static let invalidNames: [(String, NameError)] = [
        ("", .empty),
        (".org.example", .emptyLabel(name: ".org.example", index: 0)),
        ("org.example.", .emptyLabel(name: "org.example.", index: 2)),
        ("org..example", .emptyLabel(name: "org..example", index: 1)),
        (".", .emptyLabel(name: ".", index: 0)),
        ("org.example.battery low", .invalidCharacter(name: "org.example.battery low", character: " ")),
        ("org/example", .invalidCharacter(name: "org/example", character: "/")),
        ("org.example.*", .invalidCharacter(name: "org.example.*", character: "*")),
        ("org.>", .invalidCharacter(name: "org.>", character: ">")),
        ("tab\tname", .invalidCharacter(name: "tab\tname", character: "\t")),
        ("nul\u{0}", .invalidCharacter(name: "nul\u{0}", character: "\u{0}")),
        ("del\u{7F}", .invalidCharacter(name: "del\u{7F}", character: "\u{7F}")),
        ("c1\u{85}", .invalidCharacter(name: "c1\u{85}", character: "\u{85}")),
        ("c1\u{9F}", .invalidCharacter(name: "c1\u{9F}", character: "\u{9F}")),
        ("a!b", .invalidCharacter(name: "a!b", character: "!")),
        ("a,b", .invalidCharacter(name: "a,b", character: ",")),
        ("a#b", .invalidCharacter(name: "a#b", character: "#")),
        ("a\\b", .invalidCharacter(name: "a\\b", character: "\\")),
    ]

    @Test("invalid names", arguments: invalidNames)
    func invalid(name: String, expected: NameError) {
        #expect(throws: expected) { try NotificationName.validate(name) }
        #expect(!NotificationName.isValid(name))
    }

    @Test("every printable ASCII character outside the label set is rejected")
    func asciiCharacterSet() {
        let allowed = Set("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_:@+=".unicodeScalars)
        for value in UInt32(0)...0x9F {
            let scalar = Unicode.Scalar(value)!
            if scalar == "." { continue }
            let name = "a\(Character(scalar))b"
            #expect(NotificationName.isValid(name) == allowed.contains(scalar), "U+\(String(value, radix: 16))")
        }
        // From U+00A0 up, every visible scalar is a label character.
        for value: UInt32 in [0xA1, 0xFF, 0x100, 0x301, 0x4E2D, 0xFE0F, 0x1F600, 0x10FFFD] {
            #expect(NotificationName.isValid("a\(Character(Unicode.Scalar(value)!))b"), "U+\(String(value, radix: 16))")
        }
    }

    @Test("invisible scalars above U+009F are rejected, with their code point in the message")
    func invisibleScalars() {
        let rejected: [UInt32] = [
            0xA0, 0xAD, 0x1680, 0x180E, 0x2000, 0x200B, 0x200D, 0x200F, 0x2028, 0x202E, 0x202F, 0x205F, 0x2060,
            0x2066, 0x206F, 0x3000, 0xFDD0, 0xFDEF, 0xFEFF, 0xFFF0, 0xFFFD, 0xFFFE, 0xFFFF, 0x1FFFE, 0x10FFFF,
            0xE0001, 0xE007F,
        ]
        for value in rejected {
            let scalar = Unicode.Scalar(value)!
            let name = "a\(Character(scalar))b"
            #expect(throws: NameError.invalidCharacter(name: name, character: scalar), "U+\(String(value, radix: 16))") {
                try NotificationName.validate(name)
            }
            let code = "U+" + String(value, radix: 16, uppercase: true)
            let message = NameError.invalidCharacter(name: "x", character: scalar).description
            #expect(message.contains(code) && !message.contains("'\(Character(scalar))'"), "\(message)")
        }
        // Neighbours of the excluded ranges stay valid.
        for value: UInt32 in [0xA1, 0xAC, 0xAE, 0x1FFF, 0x2010, 0x2027, 0x2030, 0x205E, 0x2070, 0x2FFF, 0x3001, 0xFDCF, 0xFDF0, 0xFEFE, 0xFF00, 0xFFEF, 0x1FFFD, 0x10000, 0xDFFFD, 0xE0080] {
            #expect(NotificationName.isValid("a\(Character(Unicode.Scalar(value)!))b"), "U+\(String(value, radix: 16))")
        }
    }

    @Test("length limit is 255 UTF-8 bytes")
    func lengthLimit() {
        let ok = String(repeating: "a", count: 255)
        #expect(NotificationName.isValid(ok))
        let long = String(repeating: "a", count: 256)
        #expect(throws: NameError.tooLong(name: long, length: 256, limit: 255)) {
            try NotificationName.validate(long)
        }
        // Labels do not change the count: 127 × "ab." + "a" is 382 bytes.
        let dotted = String(repeating: "ab.", count: 85)  // 255 bytes, but ends with '.'
        #expect(throws: NameError.emptyLabel(name: dotted, index: 85)) { try NotificationName.validate(dotted) }
        let dottedOK = String(repeating: "ab.", count: 84) + "abc"  // 252 + 3
        #expect(dottedOK.utf8.count == 255)
        #expect(NotificationName.isValid(dottedOK))
        #expect(!NotificationName.isValid(dottedOK + "d"))
    }

    @Test("multi-byte characters count by their UTF-8 bytes")
    func multiByteLength() {
        // é is 2 bytes: 127 of them plus one ASCII letter is 255 bytes, 128 of them 256.
        let twoByte = String(repeating: "é", count: 127) + "a"
        #expect(twoByte.utf8.count == 255)
        #expect(NotificationName.isValid(twoByte))
        let twoByteLong = String(repeating: "é", count: 128)
        #expect(twoByteLong.count == 128)
        #expect(throws: NameError.tooLong(name: twoByteLong, length: 256, limit: 255)) {
            try NotificationName.validate(twoByteLong)
        }
        // 😀 is 4 bytes.
        let fourByte = String(repeating: "😀", count: 63) + "abc"
        #expect(fourByte.utf8.count == 255)
        #expect(NotificationName.isValid(fourByte))
        let fourByteLong = String(repeating: "😀", count: 64)
        #expect(throws: NameError.tooLong(name: fourByteLong, length: 256, limit: 255)) {
            try NotificationName.validate(fourByteLong)
        }
        // 3-byte characters around the limit: 85 × 中 = 255 bytes, 86 = 258.
        #expect(NotificationName.isValid(String(repeating: "中", count: 85)))
        #expect(!NotificationName.isValid(String(repeating: "中", count: 86)))
        // Decomposed é (e + U+0301) is 3 bytes, precomposed é 2: no normalisation, different names.
        #expect("e\u{301}".utf8.count == 3)
        #expect(NotificationName.isValid(String(repeating: "e\u{301}", count: 85)))
        #expect(!NotificationName.isValid(String(repeating: "e\u{301}", count: 86)))
    }

    @Test("a daemon's lower max_name_length")
    func customLimit() {
        #expect(NotificationName.isValid("abcdefghij", maxLength: 10))
        #expect(throws: NameError.tooLong(name: "abcdefghijk", length: 11, limit: 10)) {
            try NotificationName.validate("abcdefghijk", maxLength: 10)
        }
        #expect(!NotificationName.isValid("ééééé.", maxLength: 10))
        #expect(!NotificationName.isValid("éééééé", maxLength: 11))
        #expect(NotificationName.isValid("ééééé", maxLength: 10))
    }

    @Test("self. names are process-local")
    func processLocal() {
        #expect(NotificationName.processLocalPrefix == "self.")
        for name in ["self.x", "self.cache.flush", "self.😀"] {
            #expect(NotificationName.isProcessLocal(name), "\(name)")
        }
        for name in ["self", "Self.x", "SELF.x", "myself.x", "org.self.x", "selfish.x", "", "self-x"] {
            #expect(!NotificationName.isProcessLocal(name), "\(name)")
        }
    }

    @Test("each NameError description says what is wrong")
    func descriptions() {
        let empty = NameError.empty.description
        #expect(empty.contains("empty"))

        let long = String(repeating: "x", count: 300)
        let tooLong = NameError.tooLong(name: long, length: 300, limit: 255).description
        #expect(tooLong.contains("300"))
        #expect(tooLong.contains("255"))
        #expect(!tooLong.contains(long), "a long name is shortened in the message")

        let emptyLabel = NameError.emptyLabel(name: "a..b", index: 1).description
        #expect(emptyLabel.contains("'a..b'"))
        #expect(emptyLabel.contains("label 2"))
        #expect(NameError.emptyLabel(name: ".a", index: 0).description.contains("label 1"))

        let slash = NameError.invalidCharacter(name: "a/b", character: "/").description
        #expect(slash.contains("'a/b'"))
        #expect(slash.contains("'/'"))
        #expect(slash.contains("U+2F"))

        // White space and control characters are shown by code point only.
        let space = NameError.invalidCharacter(name: "a b", character: " ").description
        #expect(space.contains("U+20"))
        #expect(!space.contains("' '"))
        let tab = NameError.invalidCharacter(name: "a\tb", character: "\t").description
        #expect(tab.contains("U+9"))
        #expect(!tab.contains("'\t'"))

        let all = [empty, tooLong, emptyLabel, slash, space, tab]
        #expect(Set(all).count == all.count)
    }

    @Test("validation reports the first problem")
    func firstProblem() {
        // A bad character before the length check.
        let longWithSpace = String(repeating: "a", count: 300) + " "
        #expect(throws: NameError.invalidCharacter(name: longWithSpace, character: " ")) {
            try NotificationName.validate(longWithSpace)
        }
        // Characters are checked in order; the first bad one is reported.
        #expect(throws: NameError.invalidCharacter(name: "a*b>c", character: "*")) {
            try NotificationName.validate("a*b>c")
        }
        #expect(throws: NameError.emptyLabel(name: "a..*", index: 1)) { try NotificationName.validate("a..*") }
    }
}
