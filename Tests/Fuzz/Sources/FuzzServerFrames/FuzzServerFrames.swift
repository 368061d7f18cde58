// Fuzzes ServerFrame.decode(type:body:) (what the client library reads from the daemon).
//
// Input: the frame after its length prefix, i.e. the type byte and the fields.
// Properties:
// - decoding never crashes; it either returns a frame or throws a WireDecodingError with a protocol code;
// - decode, encode, decode gives an equal frame, and encoding that again gives the same bytes (a fixed point);
// - where ServerFrame keeps every field as received, the re-encoding is exactly the input. It normalises only:
//   ERROR and STATE flag bits other than bit 0, the STATE value when bit 0 is clear, and ERROR messages and
//   GOODBYE reasons beyond 1,024 bytes (cut at a character boundary: the result must be a prefix of the input);
// - the type byte decides the direction: ClientFrame.decode rejects every type ServerFrame.decode accepts.
import FuzzSupport
import NIOCore
import NotifyWire

@main
enum FuzzServerFrames {
    static func main() {
        fuzz(FuzzServerFrames.testOneInput)
    }

    static func lengthPrefixed(_ body: [UInt8]) -> [UInt8] {
        withUnsafeBytes(of: UInt32(body.count).bigEndian) { Array($0) } + body
    }

    /// Whether every field of the frame in `input` survives decoding unchanged.
    static func isCanonical(_ frame: ServerFrame, _ input: UnsafeRawBufferPointer) -> Bool {
        switch frame {
        case .error(let error):
            // type u8, request_id u32, code u16, flags u8, message (u16 + bytes)
            let flags = input[7]
            let messageLength = Int(input[8]) << 8 | Int(input[9])
            return flags <= 1 && messageLength <= ErrorFrame.maxMessageLength && error.message.utf8.count == messageLength
        case .state:
            // type u8, request_id u32, flags u8, value u64
            let flags = input[5]
            let valueIsZero = input[6...].allSatisfy { $0 == 0 }
            return flags == 1 || (flags == 0 && valueIsZero)
        case .goodbye:
            // type u8, reconnect_after_ms u32, reason (u16 + bytes)
            let reasonLength = Int(input[5]) << 8 | Int(input[6])
            return reasonLength <= GoodbyeFrame.maxReasonLength
        default:
            return true
        }
    }

    static func testOneInput(_ input: UnsafeRawBufferPointer) {
        guard let type = input.first else { return }
        var body = ByteBuffer(bytes: input.dropFirst())
        let frame: ServerFrame
        do {
            frame = try ServerFrame.decode(type: type, body: &body)
        } catch {
            _ = error.code
            _ = error.description
            return
        }
        require(frame.messageType.rawValue == type, "decoded \(frame.messageType) from type \(type)")
        require(type >= 0x80, "ServerFrame accepted client-to-daemon type \(type)")

        var encoded = ByteBuffer()
        frame.encode(into: &encoded)
        let first = bytes(of: encoded)
        if isCanonical(frame, input) {
            let expected = lengthPrefixed(Array(input))
            require(first == expected, "re-encoded \(hex(first)), received \(hex(expected))")
        }
        // Cut strings keep a prefix of the received bytes, within the limit.
        switch frame {
        case .error(let error):
            let received = Array(input[10...])
            require(
                error.message.utf8.count <= ErrorFrame.maxMessageLength
                    && received.starts(with: Array(error.message.utf8)),
                "ERROR message \(hex(error.message.utf8)) is not a prefix of \(hex(received)) within the limit")
        case .goodbye(let goodbye):
            let received = Array(input[7...])
            require(
                goodbye.reason.utf8.count <= GoodbyeFrame.maxReasonLength
                    && received.starts(with: Array(goodbye.reason.utf8)),
                "GOODBYE reason \(hex(goodbye.reason.utf8)) is not a prefix of \(hex(received)) within the limit")
        default:
            break
        }

        var again = encoded
        let decodedAgain: ServerFrame?
        do {
            decodedAgain = try ServerFrame.decodeFrame(from: &again, maxFrameLength: UInt32.max)
        } catch {
            require(false, "re-encoded frame \(hex(first)) does not decode: \(error)")
            return
        }
        require(decodedAgain == frame, "round trip changed the frame: \(frame) -> \(String(describing: decodedAgain))")
        require(again.readableBytes == 0, "decodeFrame left \(again.readableBytes) bytes")
        var second = ByteBuffer()
        decodedAgain!.encode(into: &second)
        require(bytes(of: second) == first, "encoding is not a fixed point: \(hex(first)) then \(hex(bytes(of: second)))")

        var otherBody = ByteBuffer(bytes: input.dropFirst())
        do {
            let client = try ClientFrame.decode(type: type, body: &otherBody)
            require(false, "type \(type) decodes in both directions (\(client))")
        } catch {
            require(error == .unknownMessageType(type), "ClientFrame rejected type \(type) with \(error)")
        }
    }
}
