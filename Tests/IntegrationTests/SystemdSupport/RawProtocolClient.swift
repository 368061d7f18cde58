import NIOCore
import NotifyWire

/// A protocol client on a plain blocking socket, for tests that must see the exact frames the daemon sends
/// (such as the last `GOODBYE` before end of file). Every read has a 10 s timeout.
final class RawProtocolClient {
    private let socket: UnixSocket
    private var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 20)
    private var isAtEnd = false

    init(connectingTo path: String) throws {
        socket = try UnixSocket(connectingTo: path)
        try socket.setReceiveTimeout(seconds: 10)
    }

    /// Writes the frames in one write.
    func send(_ frames: [ClientFrame]) throws {
        var buffer = ByteBuffer()
        for frame in frames { frame.encode(into: &buffer) }
        try socket.send(Array(buffer.readableBytesView))
    }

    /// The next frame, or `nil` at end of file.
    func next() throws -> ServerFrame? {
        while true {
            if let frame = try accumulator.next() { return frame }
            if isAtEnd {
                try accumulator.finish()
                return nil
            }
            let chunk = try socket.receive()
            if chunk.isEmpty { isAtEnd = true } else { accumulator.append(ByteBuffer(bytes: chunk)) }
        }
    }

    /// Reads frames until `stop` returns true for one; returns all of them, that one last.
    func read(until description: String, _ stop: (ServerFrame) -> Bool) throws -> [ServerFrame] {
        var frames: [ServerFrame] = []
        while true {
            guard let frame = try next() else {
                throw HarnessError("end of file before \(description); frames: \(frames.map(\.messageType))")
            }
            frames.append(frame)
            if stop(frame) { return frames }
        }
    }
}
