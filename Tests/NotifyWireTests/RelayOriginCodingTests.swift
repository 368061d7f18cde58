import NIOCore
import NotifyWire
import Testing

@Suite("Origin fields (PROTOCOL.md § 16)")
struct RelayOriginCodingTests {
    static let origin = RelayOrigin(host: "höst-1", uid: 1, gid: 2, pid: 3, sequence: 4)

    @Test("POST with an origin: flag 0x04, the field after the payload, and back")
    func post() throws {
        let post = ClientFrame.Post(requestID: 7, flags: .retain, name: "a.b", payload: ByteBuffer(string: "p"), origin: Self.origin)
        #expect(post.flags == [.retain, .origin])
        var buffer = ByteBuffer()
        ClientFrame.post(post).encode(into: &buffer)
        #expect(buffer.readableBytes == 4 + 1 + 4 + 1 + 2 + 3 + 4 + 1 + Self.origin.encodedLength)
        #expect(buffer.getInteger(at: 0, as: UInt32.self) == UInt32(buffer.readableBytes - 4))
        var body = buffer.getSlice(at: 5, length: buffer.readableBytes - 5)!
        #expect(try ClientFrame.decode(type: 0x04, body: &body) == .post(post))
    }

    @Test("NOTIFICATION with an origin decodes it; one without has none")
    func notification() throws {
        let frame = NotificationFrame(
            sequence: 9, sender: SenderCredentials(pid: 1, uid: 2, gid: 3), name: "x", payload: ByteBuffer(string: "y"),
            origin: Self.origin)
        var buffer = ByteBuffer()
        ServerFrame.notification(frame).encode(into: &buffer)
        var body = buffer.getSlice(at: 5, length: buffer.readableBytes - 5)!
        #expect(try ServerFrame.decode(type: 0x85, body: &body) == .notification(frame))
        var plain = ByteBuffer()
        var withoutOrigin = frame
        withoutOrigin.origin = nil
        ServerFrame.notification(withoutOrigin).encode(into: &plain)
        #expect(plain.readableBytes == buffer.readableBytes - Self.origin.encodedLength)
    }
}
