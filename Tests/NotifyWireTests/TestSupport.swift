import NIOCore
import NotifyWire

/// Feeds `chunks` one after the other to a ``FrameAccumulator``, draining whole frames after each, then
/// signals end of stream. Returns the frames decoded and the first error, if any.
func decodeStream<Frame: WireFrameDecodable>(
    chunks: [ArraySlice<UInt8>], as: Frame.Type = Frame.self, maxFrameLength: UInt32
) -> (frames: [Frame], error: WireDecodingError?) {
    var accumulator = FrameAccumulator<Frame>(maxFrameLength: maxFrameLength)
    var frames: [Frame] = []
    do throws(WireDecodingError) {
        for chunk in chunks {
            accumulator.append(ByteBuffer(bytes: chunk))
            while let frame = try accumulator.next() {
                frames.append(frame)
            }
        }
        try accumulator.finish()
    } catch {
        return (frames, error)
    }
    return (frames, nil)
}

/// Decodes one frame from the front of `bytes` with ``WireFrameDecodable/decodeFrame(from:maxFrameLength:)``.
func decodeOne<Frame: WireFrameDecodable>(
    _ bytes: [UInt8], as: Frame.Type = Frame.self, maxFrameLength: UInt32 = 131_072
) -> (frame: Frame?, remaining: Int, error: WireDecodingError?) {
    var buffer = ByteBuffer(bytes: bytes)
    do throws(WireDecodingError) {
        let frame = try Frame.decodeFrame(from: &buffer, maxFrameLength: maxFrameLength)
        return (frame, buffer.readableBytes, nil)
    } catch {
        return (nil, buffer.readableBytes, error)
    }
}

/// Cuts `bytes` into consecutive chunks of 1 to `maxChunk` bytes chosen by `generator`.
func randomChunks(
    of bytes: [UInt8], maxChunk: Int, using generator: inout some RandomNumberGenerator
) -> [ArraySlice<UInt8>] {
    var chunks: [ArraySlice<UInt8>] = []
    var start = 0
    while start < bytes.count {
        let size = Int.random(in: 1...maxChunk, using: &generator)
        let end = min(start + size, bytes.count)
        chunks.append(bytes[start..<end])
        start = end
    }
    return chunks
}

extension WireFrameEncodable {
    /// The encoded frame as an array.
    var encodedBytes: [UInt8] { encoded().bytes }
}

/// A `u32` big-endian length prefix for `length`.
func lengthPrefix(_ length: Int) -> [UInt8] {
    let value = UInt32(length)
    return [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
}
