// Fuzzes FrameAccumulator<ClientFrame> and FrameAccumulator<ServerFrame> under random chunking.
//
// Input: a header, then the byte stream.
//   byte 0: bit 0 the direction (0: client to daemon, 1: daemon to client); bits 1-2 the frame length limit
//           (131,072, 64, 16 or 1 MiB); bit 3 drain with nextRawFrame() + decode instead of next();
//           bit 4 hand each chunk over as a slice with bytes already read in front of it;
//           bit 5 put 70 frames of 1 KiB (POST or QUERY_RESULT) in front of the stream, so the accumulator's
//           read index passes 64 KiB with a partial frame held (the limit is then at least 131,072);
//           bit 6 (with bit 3) take the frames of odd type in place with takeNextFrameInPlace() first, one at a
//           time (as the daemon does at a shutdown's end); bit 7 (with bits 3 and 6) take them in runs with
//           takeFramesInPlace(), stopping at random, as the daemon takes posts and the Swift library notifications.
//   byte 1: n, then n % 16 + 1 bytes: chunk sizes (each size % 64 + 1, used in turn until the stream ends).
// Properties: the frames and the error (or the end-of-stream result of finish()) are the same whether the
// stream is appended at once or in chunks, draining after every chunk; bufferedBytes is always the number of
// bytes appended but not yet returned as part of a frame; a frame that decodes re-encodes to its raw bytes
// for ClientFrame (ServerFrame: decodes again to an equal frame).
import FuzzSupport
import NIOCore
import NotifyWire

@main
enum FuzzAccumulatorChunking {
    static func main() {
        fuzz(FuzzAccumulatorChunking.testOneInput)
    }

    struct Options {
        var serverDirection: Bool
        var maxFrameLength: UInt32
        var raw: Bool
        var sliced: Bool
        var pings: Bool
        var inPlace: Bool
        var inPlaceRuns = false
        var chunkSizes: [Int]
        var prefixLength = 0
    }

    /// What one run produced: frames as their encoded bytes, then how it ended.
    struct Outcome: Equatable {
        var frames: [[UInt8]] = []
        var error: WireDecodingError?
        var finishError: WireDecodingError?
    }

    static let limits: [UInt32] = [131_072, 64, 16, 1 << 20]

    static func testOneInput(_ input: UnsafeRawBufferPointer) {
        var reader = FuzzReader(input)
        let flags = reader.byte()
        let count = Int(reader.byte() % 16) + 1
        var sizes: [Int] = []
        for _ in 0..<count { sizes.append(Int(reader.byte() % 64) + 1) }
        var options = Options(
            serverDirection: flags & 1 != 0, maxFrameLength: limits[Int(flags >> 1) & 3], raw: flags & 8 != 0,
            sliced: flags & 16 != 0, pings: flags & 32 != 0, inPlace: flags & 72 == 72, chunkSizes: sizes)
        options.inPlaceRuns = flags & 0xC8 == 0xC8
        var stream: [UInt8] = []
        if options.pings {
            // 70 frames of about 1 KiB: POST (client) or QUERY_RESULT (daemon), 1,000 payload bytes each.
            let payload = [UInt8](repeating: 0x7B, count: 1_000)
            let frame: [UInt8] =
                options.serverDirection
                ? [0, 0, 0x03, 0xF1, 0x8B, 0, 0, 0, 1, 0, 0, 0x03, 0xE8] + payload
                : [0, 0, 0x03, 0xF5, 0x04, 0, 0, 0, 1, 0, 0, 1, 0x61, 0, 0, 0x03, 0xE8] + payload
            stream.reserveCapacity(frame.count * 70 + reader.remaining)
            for _ in 0..<70 { stream += frame }
            options.prefixLength = stream.count
            if options.maxFrameLength < 1_024 { options.maxFrameLength = 131_072 }
        }
        stream += reader.rest()
        if options.serverDirection {
            run(ServerFrame.self, stream, options)
        } else {
            run(ClientFrame.self, stream, options)
        }
    }

    static func run<Frame: WireFrameDecodable & WireFrameEncodable & Equatable>(
        _: Frame.Type, _ stream: [UInt8], _ options: Options
    ) {
        // All at once.
        var whole = FrameAccumulator<Frame>(maxFrameLength: options.maxFrameLength)
        var reference = Outcome()
        var consumed = 0
        whole.append(ByteBuffer(bytes: stream))
        drain(&whole, into: &reference, consumed: &consumed, options)
        if reference.error == nil {
            require(
                whole.bufferedBytes == stream.count - consumed,
                "bufferedBytes \(whole.bufferedBytes), expected \(stream.count - consumed)")
            do { try whole.finish() } catch { reference.finishError = error }
        }

        // In chunks.
        var chunked = FrameAccumulator<Frame>(maxFrameLength: options.maxFrameLength)
        var outcome = Outcome()
        var appended = 0
        var chunkConsumed = 0
        var chunkIndex = 0
        while appended < stream.count && outcome.error == nil {
            // Within the 1 KiB frames of bit 5, chunks are 64 times larger (the run stays fast).
            let scale = appended < options.prefixLength ? 64 : 1
            let size = min(options.chunkSizes[chunkIndex % options.chunkSizes.count] * scale, stream.count - appended)
            chunkIndex += 1
            let chunk = stream[appended..<(appended + size)]
            if options.sliced {
                // The chunk behind a few bytes that were already read, as a slice of a larger buffer.
                var buffer = ByteBuffer(bytes: [0xEE, 0xEE, 0xEE] + chunk + [0xDD])
                buffer.moveReaderIndex(forwardBy: 3)
                chunked.append(buffer.readSlice(length: size)!)
            } else {
                chunked.append(ByteBuffer(bytes: chunk))
            }
            appended += size
            drain(&chunked, into: &outcome, consumed: &chunkConsumed, options)
            if outcome.error == nil {
                require(
                    chunked.bufferedBytes == appended - chunkConsumed,
                    "after \(appended) bytes in chunks: bufferedBytes \(chunked.bufferedBytes), expected \(appended - chunkConsumed)")
            }
        }
        if outcome.error == nil {
            do { try chunked.finish() } catch { outcome.finishError = error }
        }

        require(
            outcome.frames.count == reference.frames.count,
            "\(outcome.frames.count) frames in chunks of \(options.chunkSizes), \(reference.frames.count) at once")
        require(outcome == reference, "chunks of \(options.chunkSizes) gave \(outcome), at once \(reference)")
    }

    static func drain<Frame: WireFrameDecodable & WireFrameEncodable & Equatable>(
        _ accumulator: inout FrameAccumulator<Frame>, into outcome: inout Outcome, consumed: inout Int,
        _ options: Options
    ) {
        // Frames a run took in place (bit 7), in reverse order, checked one per turn before anything read after them.
        var takenRun: [[UInt8]] = []
        while true {
            let frame: Frame
            var rawBytes: [UInt8]? = nil
            do {
                var inPlaceBytes: [UInt8]?
                if options.inPlaceRuns {
                    if takenRun.isEmpty {
                        _ = accumulator.takeFramesInPlace { type, fields, stop in
                            guard type & 1 == 1 else { return false }
                            takenRun.append([type] + Array(fields))
                            // Runs end after a frame of type 3 mod 4 as well (a reader stopping after taking one).
                            stop = type & 3 == 3
                            return true
                        }
                        takenRun.reverse()
                    }
                    inPlaceBytes = takenRun.popLast()
                } else if options.inPlace {
                    _ = try accumulator.takeNextFrameInPlace { type, fields in
                        guard type & 1 == 1 else { return false }
                        inPlaceBytes = [type] + Array(fields)
                        return true
                    }
                }
                if let inPlaceBytes {
                    rawBytes = inPlaceBytes
                    consumed += 4 + inPlaceBytes.count
                    var body = ByteBuffer(bytes: inPlaceBytes.dropFirst())
                    frame = try Frame.decode(type: inPlaceBytes[0], body: &body)
                } else if options.raw {
                    guard var raw = try accumulator.nextRawFrame() else { return }
                    rawBytes = [raw.type] + bytes(of: raw.body)
                    consumed += 4 + rawBytes!.count
                    frame = try Frame.decode(type: raw.type, body: &raw.body)
                } else {
                    let before = accumulator.bufferedBytes
                    guard let next = try accumulator.next() else { return }
                    frame = next
                    consumed += before - accumulator.bufferedBytes
                }
            } catch {
                outcome.error = error
                return
            }
            var encoded = ByteBuffer()
            frame.encode(into: &encoded)
            let encodedBytes = bytes(of: encoded)
            if let rawBytes, Frame.self == ClientFrame.self {
                require(
                    Array(encodedBytes.dropFirst(4)) == rawBytes,
                    "frame \(frame) re-encodes to \(hex(encodedBytes)), received \(hex(rawBytes))")
            }
            var again = encoded
            let decoded = try? Frame.decodeFrame(from: &again, maxFrameLength: UInt32.max)
            require(decoded == frame, "frame \(frame) does not survive encode and decode: \(String(describing: decoded))")
            outcome.frames.append(encodedBytes)
        }
    }
}
