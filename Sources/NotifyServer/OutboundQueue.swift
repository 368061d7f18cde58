import NIOCore
import NotifyWire

/// The bytes waiting to be written to one connection, with the bound that keeps a slow reader from growing
/// the daemon's memory.
///
/// Outgoing frames are appended to one buffer, which is handed to the channel once per read burst (see
/// DESIGN.md: one `writeAndFlush` per connection per burst). `pendingBytes` counts both what is still here and
/// what the channel has not yet written to the socket, and is what the bound applies to.
struct OutboundQueue {
    /// Bytes appended since the last flush.
    private(set) var buffer: ByteBuffer
    /// Bytes handed to the channel whose writes have not completed.
    private(set) var inFlightBytes = 0
    /// The bound on ``pendingBytes`` for notifications.
    let limit: Int
    /// Notifications dropped since the last `OVERFLOW` notice.
    private(set) var droppedSinceNotice: UInt64 = 0
    /// All notifications ever dropped for this connection.
    private(set) var droppedTotal: UInt64 = 0
    /// Set when the bound was hit; cleared once pending bytes drain to half the bound, so that a connection
    /// hovering at its limit does not alternate between single deliveries and drops.
    private var isShedding = false

    private let allocator: ByteBufferAllocator

    init(limit: Int, allocator: ByteBufferAllocator) {
        self.limit = limit
        self.allocator = allocator
        self.buffer = allocator.buffer(capacity: 0)
    }

    var pendingBytes: Int { buffer.readableBytes + inFlightBytes }
    var hasUnflushedBytes: Bool { buffer.readableBytes > 0 }

    /// Appends a notification frame unless the bound forbids it.
    ///
    /// - Returns: whether the frame was queued (it is counted as dropped otherwise).
    mutating func appendNotification(_ frame: ByteBuffer) -> Bool {
        if isShedding {
            if pendingBytes > limit / 2 { return drop() }
            isShedding = false
        }
        let noticeLength = droppedSinceNotice > 0 ? Self.overflowFrameLength : 0
        if pendingBytes + noticeLength + frame.readableBytes > limit {
            isShedding = true
            return drop()
        }
        if droppedSinceNotice > 0 {
            // The notice sits exactly where the gap is: after everything queued before the first drop.
            ServerFrame.overflow(droppedCount: droppedSinceNotice).encode(into: &buffer)
            droppedSinceNotice = 0
        }
        buffer.writeImmutableBuffer(frame)
        return true
    }

    /// Appends a reply or error frame. Replies are not dropped; the connection stops being read instead
    /// while ``isOverLimit`` (see ``ClientConnection``).
    mutating func appendReply(_ frame: ServerFrame) {
        frame.encode(into: &buffer)
    }

    /// Whether the connection's own requests should stop being read until it drains.
    var isOverLimit: Bool { pendingBytes > limit }

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

    /// Once a shedding connection has drained to half its bound, queues the `OVERFLOW` notice for the drops
    /// so far, so the subscriber learns of them even if no further notification comes.
    ///
    /// - Returns: whether a notice was queued (the caller flushes).
    mutating func appendOverflowNoticeIfDrained() -> Bool {
        guard droppedSinceNotice > 0, pendingBytes <= limit / 2 else { return false }
        ServerFrame.overflow(droppedCount: droppedSinceNotice).encode(into: &buffer)
        droppedSinceNotice = 0
        isShedding = false
        return true
    }

    private mutating func drop() -> Bool {
        droppedSinceNotice += 1
        droppedTotal += 1
        return false
    }

    private static let overflowFrameLength = ProtocolConstants.lengthPrefixSize + 1 + 8
}
