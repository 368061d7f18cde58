import NIOCore
import NotifyWire
import Testing

/// The shortcuts a client takes on its hot paths must mean exactly what the full codec means: reading a
/// `NOTIFICATION` in place (``NotificationFrame/InPlaceFields``) and encoding a `POST` from raw bytes
/// (``ClientFrame/Post/encode(requestID:flags:name:payload:into:)``).
@Suite("In-place NOTIFICATION reading and POST encoding")
struct InPlaceEncodingTests {
    static let sender = SenderCredentials(pid: 0x0102_0304, uid: 1_000, gid: 0xFFFF_FFFE)

    static let notifications: [(name: String, payloadLength: Int)] = [
        ("a", 0),
        ("org.example.battery.low", 12),
        ("de.beispiel.größe", 1),
        (String(repeating: "n", count: 255), 70_000),
    ]

    /// The fields of an encoded NOTIFICATION: the bytes after the length prefix and the type byte.
    static func fields(of frame: ByteBuffer) -> [UInt8] {
        Array(frame.readableBytesView.dropFirst(ProtocolConstants.lengthPrefixSize + 1))
    }

    @Test("agrees with the full decoder on every field", arguments: notifications)
    func agreesWithDecoder(name: String, payloadLength: Int) throws {
        let payload = ByteBuffer(bytes: (0..<payloadLength).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        var encoded = ByteBuffer()
        NotificationFrame.encode(sequence: 0x0A0B_0C0D_0E0F_1011, sender: Self.sender, name: name, payload: payload, into: &encoded)
        let decoded = decodeOne(encoded.bytes, as: ServerFrame.self, maxFrameLength: 200_000)
        guard case .notification(let frame)? = decoded.frame else {
            Issue.record("the full decoder did not return a NOTIFICATION: \(String(describing: decoded.error))")
            return
        }
        try Self.fields(of: encoded).withUnsafeBytes { bytes in
            let fields = try #require(NotificationFrame.InPlaceFields(fields: bytes))
            #expect(fields.sequence == frame.sequence)
            #expect(fields.sender == frame.sender)
            #expect(Array(fields.name) == Array(frame.name.utf8))
            #expect(Array(fields.payload) == Array(frame.payload.readableBytesView))
        }
    }

    @Test("agrees with the full decoder on the golden NOTIFICATION vector")
    func goldenVector() throws {
        let vector = try VectorFile.load("notification.hex")
        let decoded = decodeOne(vector.bytes, as: ServerFrame.self)
        guard case .notification(let frame)? = decoded.frame else {
            Issue.record("notification.hex did not decode to a NOTIFICATION")
            return
        }
        try Array(vector.bytes.dropFirst(ProtocolConstants.lengthPrefixSize + 1)).withUnsafeBytes { bytes in
            let fields = try #require(NotificationFrame.InPlaceFields(fields: bytes))
            #expect(fields.sequence == frame.sequence)
            #expect(fields.sender == frame.sender)
            #expect(String(decoding: fields.name, as: UTF8.self) == frame.name)
            #expect(Array(fields.payload) == Array(frame.payload.readableBytesView))
        }
    }

    @Test("declines every truncation and trailing bytes, which the full decoder rejects")
    func declinesWhatTheDecoderRejects() {
        var encoded = ByteBuffer()
        NotificationFrame.encode(
            sequence: 9, sender: Self.sender, name: "org.example.x", payload: ByteBuffer(string: "payload"), into: &encoded)
        let fields = Self.fields(of: encoded)
        for length in 0..<fields.count {
            let accepted = Array(fields.prefix(length)).withUnsafeBytes { NotificationFrame.InPlaceFields(fields: $0) != nil }
            #expect(!accepted, "accepted fields cut to \(length) of \(fields.count) bytes")
            // The full decoder rejects the same frame (with its length prefix fixed up to the shorter body).
            var frame = ByteBuffer()
            frame.writeInteger(UInt32(1 + length))
            frame.writeInteger(MessageType.notification.rawValue)
            frame.writeBytes(fields.prefix(length))
            #expect(decodeOne(frame.bytes, as: ServerFrame.self).error != nil)
        }
        let trailing = (fields + [0]).withUnsafeBytes { NotificationFrame.InPlaceFields(fields: $0) != nil }
        #expect(!trailing)
    }

    @Test("POST encoded from raw bytes equals the golden vectors", arguments: ["post.hex", "post-ack.hex", "post-retain.hex"])
    func postFromRawBytes(fileName: String) throws {
        let vector = try VectorFile.load(fileName)
        let decoded = decodeOne(vector.bytes, as: ClientFrame.self)
        guard case .post(let post)? = decoded.frame else {
            Issue.record("\(fileName) did not decode to a POST")
            return
        }
        var encoded = ByteBuffer()
        Array(post.payload.readableBytesView).withUnsafeBytes { payload in
            ClientFrame.Post.encode(
                requestID: post.requestID, flags: post.flags, name: post.name, payload: payload, into: &encoded)
        }
        #expect(encoded.bytes == vector.bytes)
    }

    @Test("POST encoded from raw bytes equals encoding the frame value, after bytes already in the buffer")
    func postMatchesFrameValue() {
        let payload = (0..<70_000).map { UInt8(truncatingIfNeeded: $0) }
        var direct = ByteBuffer()
        ClientFrame.ping(requestID: 1).encode(into: &direct)
        payload.withUnsafeBytes {
            ClientFrame.Post.encode(requestID: 0x8000_0001, flags: .retain, name: "größe.x", payload: $0, into: &direct)
        }
        var value = ByteBuffer()
        ClientFrame.ping(requestID: 1).encode(into: &value)
        ClientFrame.post(.init(requestID: 0x8000_0001, flags: .retain, name: "größe.x", payload: ByteBuffer(bytes: payload)))
            .encode(into: &value)
        #expect(direct == value)
    }
}
