import NotifyWire
import Testing

@Suite("Error codes")
struct ErrorCodeTests {
    /// PROTOCOL.md § 10.1, written out independently of ErrorCode.swift.
    static let specification: [(code: UInt16, name: String, fatal: Bool)] = [
        (1, "malformed-frame", true),
        (2, "frame-too-large", true),
        (3, "unknown-message-type", true),
        (4, "handshake-required", true),
        (5, "unsupported-version", true),
        (6, "unexpected-hello", true),
        (7, "invalid-name", false),
        (8, "payload-too-large", false),
        (9, "unknown-subscription", false),
        (10, "duplicate-subscription", false),
        (11, "too-many-subscriptions", false),
        (12, "unsupported-flags", false),
        (13, "slow-consumer", true),
        (14, "permission-denied", false),
        (15, "quota-exceeded", false),
        (16, "shutting-down", true),
        (17, "internal-error", true),
        (18, "invalid-request", false),
        (19, "unavailable", true),
    ]

    @Test("codes, wire names and fatality match the specification")
    func matchesSpecification() throws {
        #expect(ErrorCode.allCases.count == Self.specification.count)
        for entry in Self.specification {
            let code = try #require(ErrorCode(rawValue: entry.code), "code \(entry.code) is missing")
            #expect(code.description == entry.name, "code \(entry.code)")
            #expect(code.isFatal == entry.fatal, "\(entry.name)")
        }
        #expect(ErrorCode(rawValue: 0) == nil)
        #expect(ErrorCode(rawValue: 20) == nil)
        #expect(Set(ErrorCode.allCases.map(\.description)).count == ErrorCode.allCases.count)
    }

    @Test("decoding errors map to the codes of § 10")
    func decodingErrorCodes() {
        #expect(WireDecodingError.emptyFrame.code == .frameTooLarge)
        #expect(WireDecodingError.frameTooLarge(length: 9, limit: 8).code == .frameTooLarge)
        #expect(WireDecodingError.unknownMessageType(0x42).code == .unknownMessageType)
        #expect(WireDecodingError.truncatedField(message: .post, field: "name").code == .malformedFrame)
        #expect(WireDecodingError.invalidUTF8(message: .post, field: "name").code == .malformedFrame)
        #expect(WireDecodingError.trailingBytes(message: .ping, count: 1).code == .malformedFrame)
        #expect(WireDecodingError.truncatedFrame(bufferedBytes: 3).code == .malformedFrame)
        // Every decoding error is fatal: the stream cannot be resynchronised.
        let all: [WireDecodingError] = [
            .emptyFrame, .frameTooLarge(length: 9, limit: 8), .unknownMessageType(0x42),
            .truncatedField(message: .post, field: "name"), .invalidUTF8(message: .post, field: "name"),
            .trailingBytes(message: .ping, count: 1), .truncatedFrame(bufferedBytes: 3),
        ]
        for error in all {
            #expect(error.code.isFatal, "\(error)")
        }
    }

    @Test("decoding error descriptions name the problem")
    func decodingErrorDescriptions() {
        #expect(WireDecodingError.frameTooLarge(length: 131_073, limit: 131_072).description.contains("131073"))
        #expect(WireDecodingError.emptyFrame.description.contains("0"))
        #expect(WireDecodingError.unknownMessageType(0x8F).description.contains("0x8F"))
        let truncated = WireDecodingError.truncatedField(message: .subscribe, field: "name").description
        #expect(truncated.contains("SUBSCRIBE") && truncated.contains("name"))
        #expect(WireDecodingError.invalidUTF8(message: .hello, field: "client_name").description.contains("UTF-8"))
        #expect(WireDecodingError.trailingBytes(message: .ping, count: 3).description.contains("3"))
        #expect(WireDecodingError.truncatedFrame(bufferedBytes: 10).description.contains("10"))
    }
}

@Suite("ErrorFrame")
struct ErrorFrameTests {
    @Test("the closing flag follows the code's fatality")
    func closingFlag() {
        for code in ErrorCode.allCases {
            let frame = ErrorFrame(requestID: 1, code: code, message: "m")
            #expect(frame.closesConnection == code.isFatal, "\(code)")
            #expect(frame.code == code)
            #expect(frame.rawCode == code.rawValue)
            // And on the wire: flags byte at offset 11.
            let bytes = ServerFrame.error(frame).encodedBytes
            #expect(bytes[11] == (code.isFatal ? 1 : 0), "\(code)")
        }
    }

    @Test("unknown codes survive decoding")
    func unknownCode() {
        let frame = ErrorFrame(requestID: 3, rawCode: 999, closesConnection: true, message: "future")
        #expect(frame.code == nil)
        #expect(frame.description == "error-999: future")
        #expect(ErrorFrame(requestID: 3, code: .invalidName, message: "bad").description == "invalid-name: bad")
        let decoded = decodeOne(ServerFrame.error(frame).encodedBytes, as: ServerFrame.self)
        #expect(decoded.frame == .error(frame))
    }

    @Test("reserved flag bits are ignored by the receiver")
    func reservedFlagBits() throws {
        var bytes = try VectorFile.load("error.hex").bytes
        #expect(bytes[11] == 0)
        bytes[11] = 0xFE  // every reserved bit, closing bit clear
        guard case .error(let open)? = decodeOne(bytes, as: ServerFrame.self).frame else {
            Issue.record("not an ERROR frame")
            return
        }
        #expect(!open.closesConnection)
        bytes[11] = 0x03
        guard case .error(let closing)? = decodeOne(bytes, as: ServerFrame.self).frame else {
            Issue.record("not an ERROR frame")
            return
        }
        #expect(closing.closesConnection)
    }

    @Test("messages are cut at 1,024 bytes")
    func asciiTruncation() {
        #expect(ErrorFrame.maxMessageLength == 1_024)
        let exact = String(repeating: "a", count: 1_024)
        #expect(ErrorFrame(requestID: 1, code: .invalidName, message: exact).message == exact)
        let long = String(repeating: "b", count: 5_000)
        let cut = ErrorFrame(requestID: 1, code: .invalidName, message: long).message
        #expect(cut == String(repeating: "b", count: 1_024))
        // On the wire: u16 message length 1024 at offset 12, frame length 10 + 1024.
        let bytes = ServerFrame.error(ErrorFrame(requestID: 1, code: .invalidName, message: long)).encodedBytes
        #expect(bytes.count == 14 + 1_024)
        #expect(Array(bytes[0..<4]) == lengthPrefix(10 + 1_024))
        #expect(bytes[12] == 0x04 && bytes[13] == 0x00)
    }

    @Test("messages are cut without splitting a character")
    func characterBoundaries() {
        // A 2-byte character across the limit: 1,023 + 2 bytes → the character is dropped.
        let twoByte = ErrorFrame(
            requestID: 1, code: .invalidName, message: String(repeating: "a", count: 1_023) + "é").message
        #expect(twoByte == String(repeating: "a", count: 1_023))
        // Exactly at the limit: kept.
        let fits = String(repeating: "a", count: 1_022) + "é"
        #expect(ErrorFrame(requestID: 1, code: .invalidName, message: fits).message == fits)
        // A 4-byte character straddling the limit: 1,022 + 4 bytes → 1,022.
        let emoji = ErrorFrame(
            requestID: 1, code: .invalidName, message: String(repeating: "a", count: 1_022) + "😀z").message
        #expect(emoji == String(repeating: "a", count: 1_022))
        // A character made of several scalars (e + U+0301, 3 bytes) is kept or dropped whole.
        let combining = ErrorFrame(
            requestID: 1, code: .invalidName, message: String(repeating: "a", count: 1_022) + "e\u{301}").message
        #expect(combining == String(repeating: "a", count: 1_022))
        // All multi-byte: 400 × "中" (3 bytes) = 1,200 bytes → 341 characters = 1,023 bytes.
        let cjk = ErrorFrame(requestID: 1, code: .invalidName, message: String(repeating: "中", count: 400)).message
        #expect(cjk == String(repeating: "中", count: 341))
        #expect(cjk.utf8.count == 1_023)
        // The result always decodes as valid UTF-8 on the other side.
        let decoded = decodeOne(
            ServerFrame.error(ErrorFrame(requestID: 1, code: .invalidName, message: String(repeating: "中", count: 400)))
                .encodedBytes, as: ServerFrame.self)
        #expect(decoded.error == nil)
    }
}
