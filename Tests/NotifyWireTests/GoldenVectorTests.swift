import Foundation
import NIOCore
import NotifyWire
import Testing

/// The expected value of a valid vector: the frame it holds.
enum ExpectedFrame: Sendable {
    case client(ClientFrame)
    case server(ServerFrame)

    var direction: VectorFile.Direction {
        switch self {
        case .client: .clientToDaemon
        case .server: .daemonToClient
        }
    }

    var encodedBytes: [UInt8] {
        switch self {
        case .client(let frame): frame.encodedBytes
        case .server(let frame): frame.encodedBytes
        }
    }

    var messageType: MessageType {
        switch self {
        case .client(let frame): frame.messageType
        case .server(let frame): frame.messageType
        }
    }
}

/// Every vector file and what it must decode to. The values are written from the field values in each
/// file's header, independently of the bytes, so that decoding and encoding are both checked.
enum GoldenVectors {
    static let batteryLow = "org.example.battery.low"
    static let levelPayload = ByteBuffer(string: #"{"level":17}"#)
    static let batteryLevel = "org.example.battery.level"
    /// The JSON carried by `query-result.hex`: the answer to a `names` query (PROTOCOL.md § 11.3).
    static let namesJSON = #"[{"has_retained":true,"name":"org.example.battery.low","subscribers":1}]"#

    static let valid: [String: ExpectedFrame] = [
        "hello.hex": .client(.hello(.init(version: 1, flags: 0, clientName: "notifyctl"))),
        "subscribe.hex": .client(
            .subscribe(.init(requestID: 1, subscriptionID: 7, flags: [], policy: .coalesce, pattern: batteryLow))),
        "subscribe-unicode-name.hex": .client(
            .subscribe(.init(requestID: 2, subscriptionID: 8, pattern: "de.beispiel.größe"))),
        "subscribe-pattern-queue.hex": .client(
            .subscribe(
                .init(
                    requestID: 4, subscriptionID: 9, flags: .sendRetained, policy: .queue(limit: 100),
                    pattern: "org.example.>"))),
        "subscribe-states.hex": .client(
            .subscribe(
                .init(
                    requestID: 5, subscriptionID: 10, flags: [.sendRetained, .states], policy: .coalesce,
                    pattern: "org.example.battery.*"))),
        "subscribe-marks-retained.hex": .client(
            .subscribe(
                .init(
                    requestID: 6, subscriptionID: 11, flags: .marksRetained, policy: .coalesce,
                    pattern: "org.example.>"))),
        "unsubscribe.hex": .client(.unsubscribe(requestID: 3, subscriptionID: 8)),
        "post.hex": .client(
            .post(.init(requestID: 5, flags: [], name: "org.example.session.locked", payload: ByteBuffer()))),
        "post-ack.hex": .client(
            .post(.init(requestID: 2, flags: .ackWanted, name: batteryLow, payload: levelPayload))),
        "post-retain.hex": .client(
            .post(.init(requestID: 10, flags: .retain, name: batteryLow, payload: levelPayload))),
        "ping.hex": .client(.ping(requestID: 9)),
        "set-state.hex": .client(.setState(requestID: 11, name: batteryLevel, value: 4_294_967_338)),
        "get-state.hex": .client(.getState(requestID: 12, name: batteryLevel)),
        "suspend.hex": .client(.suspend(requestID: 14)),
        "resume.hex": .client(.resume(requestID: 15)),
        "query.hex": .client(.query(requestID: 16, kind: QueryKind.names.rawValue, argument: "org.example.>")),
        "welcome.hex": .server(
            .welcome(
                .init(
                    version: 1, daemonPID: 4242,
                    instanceID: InstanceID(high: 0x0011_2233_4455_6677, low: 0x8899_AABB_CCDD_EEFF),
                    limits: ServerLimits(
                        maxNameLength: 255, maxPayloadLength: 65_536, maxFrameLength: 131_072,
                        maxSubscriptions: 65_536),
                    serverName: "notifyd 0.1.0"))),
        "ok.hex": .server(.ok(requestID: 1)),
        "posted.hex": .server(.posted(requestID: 2, sequence: 42, deliveredCount: 1)),
        "pong.hex": .server(.pong(requestID: 9)),
        "notification.hex": .server(
            .notification(
                NotificationFrame(
                    sequence: 42, sender: SenderCredentials(pid: 1234, uid: 1000, gid: 100), name: batteryLow,
                    payload: levelPayload))),
        "notification-merged.hex": .server(
            .notificationMerged(
                mergedCount: 5,
                NotificationFrame(
                    sequence: 47, sender: SenderCredentials(pid: 1234, uid: 1000, gid: 100), name: batteryLow,
                    payload: levelPayload))),
        "retained.hex": .server(
            .retained(
                requestID: 4,
                NotificationFrame(
                    sequence: 42, sender: SenderCredentials(pid: 1234, uid: 1000, gid: 100), name: batteryLow,
                    payload: levelPayload))),
        "retained-marked.hex": .server(
            .retained(
                requestID: 0,
                NotificationFrame(
                    sequence: 43, sender: SenderCredentials(pid: 1234, uid: 1000, gid: 100), name: batteryLow,
                    payload: levelPayload))),
        "overflow.hex": .server(.overflow(subscriptionID: 9, droppedCount: 300)),
        "overflow-connection.hex": .server(.overflow(subscriptionID: 0, droppedCount: 2)),
        "state.hex": .server(.state(requestID: 12, value: 4_294_967_338)),
        "state-unset.hex": .server(.state(requestID: 13, value: nil)),
        "query-result.hex": .server(.queryResult(requestID: 16, json: ByteBuffer(string: namesJSON))),
        "query-result-part.hex": .server(
            .queryResultPart(requestID: 16, json: ByteBuffer(string: #"[{"has_retained":false,"name":"a.b","subscribers":2}]"#))),
        "state-changed.hex": .server(
            .stateChanged(
                StateChangedFrame(
                    requestID: 0, isCurrent: false, value: 4_294_967_338,
                    sender: SenderCredentials(pid: 1234, uid: 1000, gid: 100), name: batteryLevel))),
        "state-changed-current.hex": .server(
            .stateChanged(
                StateChangedFrame(
                    requestID: 5, isCurrent: true, value: 17, sender: SenderCredentials(pid: 0, uid: 0, gid: 0),
                    name: batteryLevel))),
        "goodbye.hex": .server(.goodbye(GoodbyeFrame(reconnectAfterMilliseconds: 1_000, reason: "notifyd is shutting down"))),
        "error.hex": .server(.error(ErrorFrame(requestID: 6, code: .invalidName, message: "invalid name 'a..b'"))),
        "error-fatal.hex": .server(
            .error(ErrorFrame(requestID: 0, code: .handshakeRequired, message: "first frame must be HELLO"))),
        "error-unknown-code.hex": .server(
            .error(ErrorFrame(requestID: 11, rawCode: 200, closesConnection: false, message: ""))),
        "error-permission-denied.hex": .server(
            .error(
                ErrorFrame(
                    requestID: 17, code: .permissionDenied,
                    message: "permission denied: only uid 1000 and root may post names under 'user.1000.' "
                        + "(built-in rule); you are uid 1001"))),
    ]

    /// Every invalid vector and the exact decoding error it must produce.
    static let invalid: [String: WireDecodingError] = [
        "invalid-zero-length.hex": .emptyFrame,
        "invalid-oversized-length.hex": .frameTooLarge(length: 131_073, limit: 131_072),
        "invalid-unknown-type.hex": .unknownMessageType(0x7F),
        "invalid-server-type-from-client.hex": .unknownMessageType(0x84),
        "invalid-client-type-from-daemon.hex": .unknownMessageType(0x05),
        "invalid-truncated-field.hex": .truncatedField(message: .subscribe, field: "pattern"),
        "invalid-truncated-integer.hex": .truncatedField(message: .ping, field: "request_id"),
        "invalid-trailing-bytes.hex": .trailingBytes(message: .ping, count: 1),
        "invalid-utf8.hex": .invalidUTF8(message: .subscribe, field: "pattern"),
        "invalid-utf8-overlong.hex": .invalidUTF8(message: .post, field: "name"),
        "invalid-utf8-surrogate.hex": .invalidUTF8(message: .hello, field: "client_name"),
        "invalid-truncated-frame.hex": .truncatedFrame(bufferedBytes: 10),
        "invalid-truncated-length-prefix.hex": .truncatedFrame(bufferedBytes: 2),
    ]
}

@Suite("Golden vectors")
struct GoldenVectorTests {
    @Test("every vector file is covered by a test, and every test by a file")
    func everyFileIsCovered() throws {
        let files = Set(try VectorFile.allFileNames())
        let valid = Set(GoldenVectors.valid.keys)
        let invalid = Set(GoldenVectors.invalid.keys)
        #expect(valid.isDisjoint(with: invalid))
        #expect(files.subtracting(valid.union(invalid)).sorted() == [], "vector files without a test")
        #expect(valid.union(invalid).subtracting(files).sorted() == [], "tests without a vector file")
        // Guards against the directory lookup silently finding nothing.
        #expect(files.count >= 20)
    }

    @Test("every vector file is listed in the vectors README")
    func everyFileIsDocumented() throws {
        let readme = try String(
            contentsOf: VectorFile.directory.appendingPathComponent("README.md"), encoding: .utf8)
        let missing = try VectorFile.allFileNames().filter { !readme.contains("`\($0)`") }
        #expect(missing == [], "not listed in protocol/vectors/README.md")
    }

    @Test("one vector per message type")
    func everyMessageTypeHasAVector() {
        let covered = Set(GoldenVectors.valid.values.map(\.messageType))
        #expect(covered == Set(MessageType.allCases))
    }

    @Test("valid vector decodes to the expected frame and re-encodes byte for byte",
          arguments: GoldenVectors.valid.keys.sorted())
    func validVector(fileName: String) throws {
        let file = try VectorFile.load(fileName)
        let expected = try #require(GoldenVectors.valid[fileName])
        #expect(file.expectedError == nil, "a valid vector must not carry expect-error")
        #expect(!fileName.hasPrefix("invalid-"))
        #expect(file.direction == expected.direction)

        // The length prefix counts exactly the bytes after it, and the type byte follows it.
        #expect(file.bytes.count >= 5)
        #expect(Array(file.bytes.prefix(4)) == lengthPrefix(file.bytes.count - 4))
        #expect(file.bytes[4] == expected.messageType.rawValue)

        // Decode (with the decoder of the file's direction) and compare with the expected value.
        switch expected {
        case .client(let frame):
            let result = decodeOne(file.bytes, as: ClientFrame.self, maxFrameLength: file.maxFrameLength)
            #expect(result.error == nil)
            #expect(result.frame == frame)
            #expect(result.remaining == 0)
            // The other direction refuses the type.
            let wrong = decodeOne(file.bytes, as: ServerFrame.self, maxFrameLength: file.maxFrameLength)
            #expect(wrong.error == .unknownMessageType(file.bytes[4]))
        case .server(let frame):
            let result = decodeOne(file.bytes, as: ServerFrame.self, maxFrameLength: file.maxFrameLength)
            #expect(result.error == nil)
            #expect(result.frame == frame)
            #expect(result.remaining == 0)
            let wrong = decodeOne(file.bytes, as: ClientFrame.self, maxFrameLength: file.maxFrameLength)
            #expect(wrong.error == .unknownMessageType(file.bytes[4]))
        }

        // Encode the expected value and compare with the file, byte for byte.
        let encoded = expected.encodedBytes
        #expect(encoded == file.bytes, "encoded: \(hex(encoded))\n   file: \(hex(file.bytes))")
    }

    @Test("invalid vector is rejected with the expected error", arguments: GoldenVectors.invalid.keys.sorted())
    func invalidVector(fileName: String) throws {
        let file = try VectorFile.load(fileName)
        let expected = try #require(GoldenVectors.invalid[fileName])
        #expect(fileName.hasPrefix("invalid-"))
        let expectedCode = try #require(file.expectedError, "an invalid vector needs '# expect-error:'")
        #expect(expected.code.description == expectedCode)

        // The stream as a whole, through a FrameAccumulator, fed at once and then one byte at a time.
        let whole: [ArraySlice<UInt8>] = [file.bytes[...]]
        let byteByByte = file.bytes.indices.map { file.bytes[$0...$0] }
        for chunks in [whole, byteByByte] {
            let error: WireDecodingError?
            switch file.direction {
            case .clientToDaemon:
                let decoded = decodeStream(chunks: chunks, as: ClientFrame.self, maxFrameLength: file.maxFrameLength)
                #expect(decoded.frames.isEmpty)
                error = decoded.error
            case .daemonToClient:
                let decoded = decodeStream(chunks: chunks, as: ServerFrame.self, maxFrameLength: file.maxFrameLength)
                #expect(decoded.frames.isEmpty)
                error = decoded.error
            }
            #expect(error == expected)
            #expect(error?.code.description == expectedCode)
        }

        // A single decodeFrame call: throws at once, except for a stream that ends inside a frame, which is
        // only detectable at end of stream (decodeFrame waits for more bytes and consumes nothing).
        let single: (error: WireDecodingError?, remaining: Int, decodedSomething: Bool)
        switch file.direction {
        case .clientToDaemon:
            let result = decodeOne(file.bytes, as: ClientFrame.self, maxFrameLength: file.maxFrameLength)
            single = (result.error, result.remaining, result.frame != nil)
        case .daemonToClient:
            let result = decodeOne(file.bytes, as: ServerFrame.self, maxFrameLength: file.maxFrameLength)
            single = (result.error, result.remaining, result.frame != nil)
        }
        #expect(!single.decodedSomething)
        if case .truncatedFrame = expected {
            #expect(single.error == nil)
            #expect(single.remaining == file.bytes.count)
        } else {
            #expect(single.error == expected)
        }
    }

    @Test("oversized length is rejected from the prefix alone")
    func oversizedRejectedOnPrefix() throws {
        let file = try VectorFile.load("invalid-oversized-length.hex")
        let prefixOnly = Array(file.bytes.prefix(4))
        let result = decodeOne(prefixOnly, as: ClientFrame.self, maxFrameLength: file.maxFrameLength)
        #expect(result.error == .frameTooLarge(length: 131_073, limit: 131_072))
        // With a larger limit the same prefix merely waits for its body.
        let larger = decodeOne(prefixOnly, as: ClientFrame.self, maxFrameLength: 131_073)
        #expect(larger.error == nil)
        #expect(larger.frame == nil)
        #expect(larger.remaining == 4)
    }

    @Test("the example session's frames are the vectors")
    func exampleSessionMatchesVectors() throws {
        // PROTOCOL.md § 13 prints these frames; check that the document shows the same bytes as the files.
        let spec = try String(
            contentsOf: VectorFile.directory.deletingLastPathComponent().appendingPathComponent("PROTOCOL.md"),
            encoding: .utf8)
        let session = try #require(spec.range(of: "## 13 Example session")).upperBound
        let specBytes = hexBytesInCodeBlocks(String(spec[session...]))
        for name in ["hello.hex", "welcome.hex", "subscribe.hex", "ok.hex", "post-ack.hex", "posted.hex",
                     "notification.hex"] {
            let bytes = try VectorFile.load(name).bytes
            #expect(specBytes.firstRange(of: bytes) != nil, "PROTOCOL.md § 13 does not show \(name)")
        }
    }

    /// All hex byte pairs in the fenced code blocks of `markdown`, concatenated (annotations ignored).
    private func hexBytesInCodeBlocks(_ markdown: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var inBlock = false
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inBlock.toggle()
                continue
            }
            guard inBlock else { continue }
            for token in line.split(separator: " ") {
                guard token.count == 2, let byte = UInt8(token, radix: 16) else { break }
                bytes.append(byte)
            }
        }
        return bytes
    }
}

@Suite("Vector file format")
struct VectorFileFormatTests {
    @Test func parsesCommentsMetadataAndHex() throws {
        let file = try VectorFile.parse(
            """
            # A description line; not metadata.
            #   name = x
            # direction: daemon-to-client
            #expect-error:   malformed-frame
            # max-frame-length: 77
            00 0A  # trailing comment with hex-looking text: ff ff
              Bc\t01

            """, fileName: "x.hex")
        #expect(file.direction == .daemonToClient)
        #expect(file.expectedError == "malformed-frame")
        #expect(file.maxFrameLength == 77)
        #expect(file.bytes == [0x00, 0x0A, 0xBC, 0x01])
    }

    @Test func rejectsBadFiles() {
        #expect(throws: VectorFileError.self) { try VectorFile.parse("00 01\n", fileName: "no-direction.hex") }
        #expect(throws: VectorFileError.self) {
            try VectorFile.parse("# direction: sideways\n00\n", fileName: "bad-direction.hex")
        }
        #expect(throws: VectorFileError.self) {
            try VectorFile.parse("# direction: client-to-daemon\n00 0\n", fileName: "odd.hex")
        }
        #expect(throws: VectorFileError.self) {
            try VectorFile.parse("# direction: client-to-daemon\n0g\n", fileName: "not-hex.hex")
        }
        #expect(throws: VectorFileError.self) {
            try VectorFile.parse("# direction: client-to-daemon\n# only comments\n", fileName: "empty.hex")
        }
    }
}
