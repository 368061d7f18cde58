// Fuzzes ClientFrame.decode(type:body:) (what the daemon reads from every client).
//
// Input: the frame after its length prefix, i.e. the type byte and the fields.
// Properties:
// - decoding never crashes; it either returns a frame or throws a WireDecodingError with a protocol code;
// - every ClientFrame field is kept as received, so a decoded frame encodes back to exactly the input bytes
//   (with the length prefix in front), and decoding those bytes with decodeFrame gives an equal frame;
// - the type byte decides the direction: ServerFrame.decode rejects every type ClientFrame.decode accepts.
import FuzzSupport
import NIOCore
import NotifyWire

@main
enum FuzzClientFrames {
    static func main() {
        fuzz(FuzzClientFrames.testOneInput)
    }

    static func testOneInput(_ input: UnsafeRawBufferPointer) {
        guard let type = input.first else { return }
        var body = ByteBuffer(bytes: input.dropFirst())
        let frame: ClientFrame
        do {
            frame = try ClientFrame.decode(type: type, body: &body)
        } catch {
            _ = error.code
            _ = error.description
            return
        }
        require(frame.messageType.rawValue == type, "decoded \(frame.messageType) from type \(type)")
        require(type < 0x80, "ClientFrame accepted daemon-to-client type \(type)")

        // Re-encode: exactly the input, behind its length prefix.
        var encoded = ByteBuffer()
        frame.encode(into: &encoded)
        let expected = [UInt8](withUnsafeBytes(of: UInt32(input.count).bigEndian) { Array($0) }) + Array(input)
        require(bytes(of: encoded) == expected, "re-encoded \(hex(bytes(of: encoded))), received \(hex(expected))")

        // And back.
        var again = encoded
        let decodedAgain: ClientFrame?
        do {
            decodedAgain = try ClientFrame.decodeFrame(from: &again, maxFrameLength: UInt32.max)
        } catch {
            require(false, "re-encoded frame does not decode: \(error)")
            return
        }
        require(decodedAgain == frame, "round trip changed the frame: \(frame) -> \(String(describing: decodedAgain))")
        require(again.readableBytes == 0, "decodeFrame left \(again.readableBytes) bytes")

        // The other direction must reject the type.
        var otherBody = ByteBuffer(bytes: input.dropFirst())
        do {
            let server = try ServerFrame.decode(type: type, body: &otherBody)
            require(false, "type \(type) decodes in both directions (\(server))")
        } catch {
            require(error == .unknownMessageType(type), "ServerFrame rejected type \(type) with \(error)")
        }
    }
}
