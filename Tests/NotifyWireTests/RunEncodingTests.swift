import NIOCore
import NotifyWire
import Testing

/// The daemon's run encoder and in-place `POST` view against the golden vectors and the full codec.
@Suite("Run encoding")
struct RunEncodingTests {
    static let sender = SenderCredentials(pid: 1234, uid: 1000, gid: 100)

    @Test("the run encoder writes the golden NOTIFICATION byte for byte")
    func goldenVector() throws {
        let file = try VectorFile.load("notification.hex")
        var encoder = NotificationFrame.RunEncoder()
        encoder.start(sender: Self.sender, name: "org.example.battery.low")
        var buffer = ByteBuffer()
        let length = Array(#"{"level":17}"#.utf8).withUnsafeBytes {
            encoder.encode(sequence: 42, payload: $0, into: &buffer)
        }
        #expect(buffer.bytes == file.bytes)
        #expect(length == file.bytes.count)
    }

    @Test("the inlined frame writer's literals are the protocol's constants")
    func writerConstants() {
        #expect(NotificationRunEncoder.lengthPrefixSize == ProtocolConstants.lengthPrefixSize)
        #expect(NotificationRunEncoder.notificationType == MessageType.notification.rawValue)
    }

    @Test("a run's frames equal the shared encoder's, for each name and payload size, after a restart", arguments: NotificationEncodingTests.cases)
    func sameBytesAsSharedEncoder(name: String, payloadLength: Int) {
        let payload = (0..<payloadLength).map { UInt8(truncatingIfNeeded: $0 &* 3) }
        var encoder = NotificationFrame.RunEncoder()
        // A run on another name first: starting again must forget it.
        encoder.start(sender: SenderCredentials(pid: 9, uid: 9, gid: 9), name: "previous.run.name")
        encoder.start(sender: NotificationEncodingTests.sender, name: name)
        var run = ByteBuffer()
        var expected = ByteBuffer()
        for sequence in UInt64(1)...3 {
            payload.withUnsafeBytes { _ = encoder.encode(sequence: sequence, payload: $0, into: &run) }
            NotificationFrame.encode(
                sequence: sequence, sender: NotificationEncodingTests.sender, name: name, payload: ByteBuffer(bytes: payload),
                into: &expected)
        }
        #expect(run.bytes == expected.bytes)
    }

    @Test("a post encoded alone from its POST's name field equals the shared encoder's", arguments: NotificationEncodingTests.cases)
    func aloneFrameFromThePostsNameField(name: String, payloadLength: Int) throws {
        let payload = ByteBuffer(bytes: (0..<payloadLength).map { UInt8(truncatingIfNeeded: $0 &* 5) })
        var post = ByteBuffer()
        ClientFrame.post(.init(requestID: 3, name: name, payload: payload)).encode(into: &post)
        let sender = NotificationEncodingTests.sender
        var alone = ByteBuffer(string: "before")  // appended after what the queue holds already
        let length = try Self.postFields(post) { fields in
            NotificationRunEncoder.encodeFrame(
                sequence: 77, pid: sender.pid, uid: sender.uid, gid: sender.gid, nameField: fields.nameField,
                payload: fields.payload, into: &alone)
        }
        var expected = ByteBuffer(string: "before")
        NotificationFrame.encode(sequence: 77, sender: sender, name: name, payload: payload, into: &expected)
        #expect(alone.bytes == expected.bytes)
        #expect(length == expected.readableBytes - 6)
    }

    @Test("hasName compares the name field of a POST byte for byte")
    func recognisesItsName() throws {
        var encoder = NotificationFrame.RunEncoder()
        #expect(![0, 1, 0x61].withUnsafeBytes { encoder.hasName($0) }, "no run started")
        encoder.start(sender: Self.sender, name: "a.b")
        for (name, expected) in [("a.b", true), ("a.c", false), ("a.b.", false), ("a", false)] {
            var post = ByteBuffer()
            ClientFrame.post(.init(requestID: 1, name: name, payload: ByteBuffer(string: "x"))).encode(into: &post)
            let matches = try Self.postFields(post) { encoder.hasName($0.nameField) }
            #expect(matches == expected, "\(name)")
        }
    }

    @Test("POST fields read in place agree with the full decoder on the golden vectors", arguments: ["post.hex", "post-ack.hex", "post-retain.hex"])
    func postFieldsAgreeWithDecoder(file: String) throws {
        let vector = try VectorFile.load(file)
        guard case .post(let post)? = decodeOne(vector.bytes, as: ClientFrame.self).frame else {
            Issue.record("\(file) did not decode to a POST")
            return
        }
        try Self.postFields(ByteBuffer(bytes: vector.bytes)) { fields in
            #expect(fields.flags == post.flags.rawValue)
            #expect(Array(fields.nameField.dropFirst(2)) == Array(post.name.utf8))
            #expect(Array(fields.payload) == Array(post.payload.readableBytesView))
        }
    }

    @Test("POST fields decline every truncation and trailing bytes, which the full decoder rejects")
    func postFieldsDeclineMalformedFrames() {
        var post = ByteBuffer()
        ClientFrame.post(.init(requestID: 3, name: "org.example.x", payload: ByteBuffer(string: "payload"))).encode(into: &post)
        let fields = Array(post.readableBytesView.dropFirst(ProtocolConstants.lengthPrefixSize + 1))
        for length in 0..<fields.count {
            let accepted = Array(fields.prefix(length)).withUnsafeBytes { ClientFrame.PostFields(fields: $0) != nil }
            #expect(!accepted, "accepted fields cut to \(length) of \(fields.count) bytes")
        }
        #expect((fields + [0]).withUnsafeBytes { ClientFrame.PostFields(fields: $0) == nil })
    }

    /// Runs `body` on the in-place fields of the encoded `POST` frame `frame` (length prefix included).
    private static func postFields<T>(_ frame: ByteBuffer, _ body: (ClientFrame.PostFields) throws -> T) throws -> T {
        let fields = Array(frame.readableBytesView.dropFirst(ProtocolConstants.lengthPrefixSize + 1))
        return try fields.withUnsafeBytes { bytes in
            try body(try #require(ClientFrame.PostFields(fields: bytes)))
        }
    }
}
