import DequeModule
import NIOCore
import NotifyWire

/// The bytes waiting to be written to one connection.
///
/// Outgoing frames are appended to one buffer, which is handed to the channel once per read burst (one
/// `writeAndFlush` per connection per burst: a write per frame is a system call per frame). ``pendingBytes`` counts both what is still here
/// and what the channel has not yet written to the socket; the connection keeps it within its bound.
struct OutboundQueue {
    /// Bytes appended since the last flush.
    var buffer: ByteBuffer
    /// Bytes handed to the channel whose writes have not completed.
    private(set) var inFlightBytes = 0
    /// The batches the channel did not finish writing when it took them, oldest first: their storage is shared
    /// with the channel, so keeping them costs nothing, and a hand-over reads the bytes never written from them.
    /// Each with the time it was handed over: a clock read per write that did not finish at once, for the
    /// connection's lag.
    private var unfinishedBatches = Deque<(bytes: ByteBuffer, since: NIODeadline)>()

    /// When the oldest batch the channel has not finished writing was handed to it.
    var oldestUnfinishedSince: NIODeadline? { unfinishedBatches.first?.since }
    private let allocator: ByteBufferAllocator

    /// The most storage a batch is given up front.
    private let batchCapacityLimit: Int
    /// The storage the next batch is given when its first frame arrives: the size of the last batch, so a busy
    /// connection's batches are not grown (copied) frame by frame, and an idle one holds none.
    private var nextBatchCapacity = 256

    /// - Parameter batchCapacityLimit: the most storage a batch is given up front (about the largest batch).
    init(allocator: ByteBufferAllocator, batchCapacityLimit: Int) {
        self.allocator = allocator
        self.batchCapacityLimit = batchCapacityLimit
        self.buffer = allocator.buffer(capacity: 0)
    }

    var pendingBytes: Int { buffer.readableBytes + inFlightBytes }
    var hasUnflushedBytes: Bool { buffer.readableBytes > 0 }

    mutating func append(_ frame: ByteBuffer) {
        if buffer.capacity == 0 { buffer.reserveCapacity(max(nextBatchCapacity, frame.readableBytes)) }
        buffer.writeImmutableBuffer(frame)
    }

    /// Appends what `encode` writes, `size` bytes or about that many (the batch's first frame sizes its storage).
    @inline(__always)
    mutating func append(encodedSize size: Int, _ encode: (inout ByteBuffer) -> Void) {
        if buffer.capacity == 0 { buffer.reserveCapacity(max(nextBatchCapacity, size)) }
        encode(&buffer)
    }

    mutating func append(_ frame: ServerFrame) {
        if buffer.capacity == 0 { buffer.reserveCapacity(nextBatchCapacity) }
        frame.encode(into: &buffer)
    }

    /// Emptied storage of an earlier batch, ready to take the next one.
    private var spare: ByteBuffer?
    /// The largest storage kept as ``spare``: an idle connection should not keep a burst's worth of memory.
    private static let spareCapacityLimit = 4096

    /// Takes the unflushed bytes to hand to the channel, counting them as in flight.
    mutating func takeForWrite() -> ByteBuffer {
        let bytes = buffer
        inFlightBytes += bytes.readableBytes
        // The batch belongs to the channel until it is written; the next one starts in the spare storage, or
        // in storage sized like this one once its first frame comes.
        if let spare = spare.take() {
            buffer = spare
        } else {
            buffer = allocator.buffer(capacity: 0)
            nextBatchCapacity = min(max(bytes.readableBytes, 256), batchCapacityLimit)
        }
        return bytes
    }

    /// Keeps a batch's storage for a later batch, if the channel has let go of it (its write is complete).
    ///
    /// - Returns: `true` if the channel holds no reference to `bytes`: their write has completed.
    mutating func recycle(_ bytes: consuming ByteBuffer) -> Bool {
        var bytes = bytes
        guard bytes.modifyIfUniquelyOwned({ $0.clear() }) != nil else {
            unfinishedBatches.append((bytes, .now()))
            return false
        }
        if spare == nil, bytes.capacity <= Self.spareCapacityLimit { spare = bytes }
        return true
    }

    /// Records that `count` bytes handed out by ``takeForWrite()`` were written or discarded.
    mutating func completeWrite(_ count: Int) {
        inFlightBytes -= count
        // Writes complete in order, and one finishes inside its call only when none is waiting before it: so a
        // completion, when batches are kept, is the oldest one's.
        if !unfinishedBatches.isEmpty { unfinishedBatches.removeFirst() }
    }

    /// Everything owed to the connection, for a hand-over: the last `unwrittenInChannel` bytes of the batches the
    /// channel holds (what it has not written to the socket yet, as it reports), then what was never handed to it.
    func owedBytes(unwrittenInChannel: Int) -> [UInt8] {
        var batches: [UInt8] = []
        for batch in unfinishedBatches { batches += batch.bytes.readableBytesView }
        var owed = Array(batches.suffix(min(max(unwrittenInChannel, 0), batches.count)))
        owed += buffer.readableBytesView
        return owed
    }

    /// Forgets everything not yet handed to the channel; returns how many bytes that was.
    mutating func discardUnflushed() -> Int {
        let count = buffer.readableBytes
        buffer.clear()
        return count
    }
}
