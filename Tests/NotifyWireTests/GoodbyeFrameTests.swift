import NIOCore
import NotifyWire
import Testing

@Suite("GOODBYE frame")
struct GoodbyeFrameTests {
    @Test("the golden vector decodes to GOODBYE(1000 ms, reason) and re-encodes byte for byte")
    func vector() throws {
        let file = try VectorFile.load("goodbye.hex")
        let expected = ServerFrame.goodbye(GoodbyeFrame(reconnectAfterMilliseconds: 1_000, reason: "notifyd is shutting down"))
        #expect(file.direction == .daemonToClient)
        let result = decodeOne(file.bytes, as: ServerFrame.self)
        #expect(result.error == nil)
        #expect(result.frame == expected)
        #expect(result.remaining == 0)
        #expect(expected.encodedBytes == file.bytes)
        #expect(file.bytes[4] == 0x88)
        #expect(MessageType.goodbye.rawValue == 0x88)
        #expect(MessageType.goodbye.description == "GOODBYE")
        #expect(!MessageType.goodbye.isClientToDaemon)
    }

    @Test("round trip at the field limits")
    func roundTrip() {
        for frame in [
            GoodbyeFrame(reconnectAfterMilliseconds: 0, reason: ""),
            GoodbyeFrame(reconnectAfterMilliseconds: .max, reason: "redémarrage — 再起動"),
        ] {
            let bytes = ServerFrame.goodbye(frame).encodedBytes
            #expect(bytes.count == 4 + 1 + 4 + 2 + frame.reason.utf8.count)
            #expect(decodeOne(bytes, as: ServerFrame.self).frame == .goodbye(frame))
        }
    }

    @Test("a long reason is cut to 1,024 bytes at a character boundary")
    func longReason() {
        let frame = GoodbyeFrame(reconnectAfterMilliseconds: 5, reason: String(repeating: "é", count: 600))
        #expect(frame.reason.utf8.count == 1_024)
        #expect(frame.reason == String(repeating: "é", count: 512))
    }

    @Test("a daemon rejects GOODBYE from a client; truncated fields are malformed")
    func rejections() {
        let bytes = ServerFrame.goodbye(GoodbyeFrame(reconnectAfterMilliseconds: 1, reason: "bye")).encodedBytes
        #expect(decodeOne(bytes, as: ClientFrame.self).error == .unknownMessageType(0x88))
        // Length 3: the type byte and two bytes of reconnect_after_ms.
        let truncated: [UInt8] = [0, 0, 0, 3, 0x88, 0, 0]
        #expect(decodeOne(truncated, as: ServerFrame.self).error == .truncatedField(message: .goodbye, field: "reconnect_after_ms"))
        // Length 5: reconnect_after_ms but no reason.
        let noReason: [UInt8] = [0, 0, 0, 5, 0x88, 0, 0, 0, 1]
        #expect(decodeOne(noReason, as: ServerFrame.self).error == .truncatedField(message: .goodbye, field: "reason"))
        // One byte after the reason.
        var trailing = bytes
        trailing[3] += 1
        trailing.append(0)
        #expect(decodeOne(trailing, as: ServerFrame.self).error == .trailingBytes(message: .goodbye, count: 1))
    }

    @Test("the description names the delay and the reason")
    func description() {
        #expect(
            GoodbyeFrame(reconnectAfterMilliseconds: 250, reason: "notifyd is shutting down").description
                == "goodbye: notifyd is shutting down (reconnect after 250 ms)")
    }
}
