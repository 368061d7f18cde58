import NIOCore
import NotifyWire
import Testing

@Suite("NOTIFICATION encoding")
struct NotificationEncodingTests {
    static let sender = SenderCredentials(pid: 0xDEAD_BEEF, uid: 1_000, gid: 0xFFFF_FFFF)

    static let cases: [(name: String, payloadLength: Int)] = [
        ("a", 0),
        ("org.example.battery.low", 12),
        ("de.beispiel.größe", 1),
        (String(repeating: "😀", count: 63) + "abc", 65_536),
        (String(repeating: "n", count: 255), 70_000),
    ]

    @Test("encodedLength is the exact size of the encoded frame", arguments: cases)
    func encodedLength(name: String, payloadLength: Int) {
        let payload = ByteBuffer(bytes: (0..<payloadLength).map { UInt8(truncatingIfNeeded: $0) })
        var buffer = ByteBuffer()
        NotificationFrame.encode(sequence: 7, sender: Self.sender, name: name, payload: payload, into: &buffer)
        let expected = NotificationFrame.encodedLength(
            nameByteCount: name.utf8.count, payloadByteCount: payloadLength)
        #expect(buffer.readableBytes == expected)
        #expect(expected == 31 + name.utf8.count + payloadLength)
        // The length prefix says the same.
        #expect(Array(buffer.bytes.prefix(4)) == lengthPrefix(expected - 4))
    }

    @Test("encoding from fields equals encoding the frame value", arguments: cases)
    func sameBytesAsFrameValue(name: String, payloadLength: Int) {
        let payload = ByteBuffer(bytes: (0..<payloadLength).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        var direct = ByteBuffer()
        NotificationFrame.encode(sequence: .max, sender: Self.sender, name: name, payload: payload, into: &direct)
        let value = ServerFrame.notification(
            NotificationFrame(sequence: .max, sender: Self.sender, name: name, payload: payload))
        #expect(direct.bytes == value.encodedBytes)
        let decoded = decodeOne(direct.bytes, as: ServerFrame.self, maxFrameLength: 200_000)
        #expect(decoded.frame == value)
        #expect(decoded.remaining == 0)
    }

    @Test("appends to a buffer that already holds frames")
    func appendsAfterExistingBytes() {
        var buffer = ByteBuffer()
        ServerFrame.ok(requestID: 1).encode(into: &buffer)
        NotificationFrame.encode(
            sequence: 1, sender: Self.sender, name: "a.b", payload: ByteBuffer(string: "p"), into: &buffer)
        NotificationFrame.encode(
            sequence: 2, sender: Self.sender, name: "c", payload: ByteBuffer(), into: &buffer)
        let result = decodeStream(chunks: [buffer.bytes[...]], as: ServerFrame.self, maxFrameLength: 131_072)
        #expect(result.error == nil)
        #expect(
            result.frames == [
                .ok(requestID: 1),
                .notification(.init(sequence: 1, sender: Self.sender, name: "a.b", payload: ByteBuffer(string: "p"))),
                .notification(.init(sequence: 2, sender: Self.sender, name: "c", payload: ByteBuffer())),
            ])
    }

    @Test("the golden NOTIFICATION via the shared encoder")
    func goldenVector() throws {
        let file = try VectorFile.load("notification.hex")
        var buffer = ByteBuffer()
        NotificationFrame.encode(
            sequence: 42, sender: SenderCredentials(pid: 1234, uid: 1000, gid: 100), name: "org.example.battery.low",
            payload: ByteBuffer(string: #"{"level":17}"#), into: &buffer)
        #expect(buffer.bytes == file.bytes)
        #expect(NotificationFrame.encodedLength(nameByteCount: 23, payloadByteCount: 12) == file.bytes.count)
    }
}
