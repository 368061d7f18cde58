import NIOCore
import NotifyWire

/// The bytes waiting to be written to one connection.
///
/// Outgoing frames are appended to one buffer, which is handed to the channel once per read burst (see
/// DESIGN.md: one `writeAndFlush` per connection per burst). ``pendingBytes`` counts both what is still here
/// and what the channel has not yet written to the socket; the connection keeps it within its bound.
struct OutboundQueue {
    /// Bytes appended since the last flush.
    var buffer: ByteBuffer
    /// Bytes handed to the channel whose writes have not completed.
    private(set) var inFlightBytes = 0
    private let allocator: ByteBufferAllocator

    init(allocator: ByteBufferAllocator) {
        self.allocator = allocator
        self.buffer = allocator.buffer(capacity: 0)
    }

    var pendingBytes: Int { buffer.readableBytes + inFlightBytes }
    var hasUnflushedBytes: Bool { buffer.readableBytes > 0 }

    mutating func append(_ frame: ByteBuffer) {
        buffer.writeImmutableBuffer(frame)
    }

    mutating func append(_ frame: ServerFrame) {
        frame.encode(into: &buffer)
    }

    /// Takes the unflushed bytes to hand to the channel, counting them as in flight.
    mutating func takeForWrite() -> ByteBuffer {
        let bytes = buffer
        inFlightBytes += bytes.readableBytes
        // The written batch is owned by the channel now; the next one starts in fresh storage sized like it.
        buffer = allocator.buffer(capacity: min(max(bytes.readableBytes, 256), 65_536))
        return bytes
    }

    /// Records that `count` bytes handed out by ``takeForWrite()`` were written or discarded.
    mutating func completeWrite(_ count: Int) {
        inFlightBytes -= count
    }

    /// Forgets everything not yet handed to the channel; returns how many bytes that was.
    mutating func discardUnflushed() -> Int {
        let count = buffer.readableBytes
        buffer.clear()
        return count
    }
}
