import DequeModule
import NIOCore
import NotifyWire

/// The bytes waiting to be written to one connection.
///
/// Outgoing frames are appended to one buffer, which is handed to the channel once per read burst (one
/// flush per connection per burst: a write per frame is a system call per frame). A large run of notifications is
/// not copied into each recipient's buffer: its storage, shared by all its recipients, is queued as a segment of
/// its own and written from there (one `writev` with the buffer). ``pendingBytes`` counts both what is still here
/// and what the channel has not yet written to the socket; the connection keeps it within its bound.
struct OutboundQueue {
    /// Bytes appended since the last flush, after the ``segments``.
    var buffer: ByteBuffer
    /// What is to be written before ``buffer``, in order: shared runs, and the buffers that came before them.
    private var segments: [ByteBuffer] = []
    /// Bytes in ``segments``.
    private var segmentBytes = 0
    /// Bytes handed to the channel whose writes have not completed.
    private(set) var inFlightBytes = 0
    /// The batches the channel did not finish writing when it took them, oldest first: their storage is shared
    /// with the channel, so keeping them costs nothing, and a hand-over reads the bytes never written from them.
    /// Each with the time it was handed over: a clock read per write that did not finish at once, for the
    /// connection's lag.
    private var unfinishedBatches = Deque<(segments: [ByteBuffer], since: NIODeadline)>()

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

    /// Bytes queued and not yet handed to the channel.
    var unflushedBytes: Int { buffer.readableBytes + segmentBytes }
    var pendingBytes: Int { unflushedBytes + inFlightBytes }
    var hasUnflushedBytes: Bool { unflushedBytes > 0 }

    mutating func append(_ frame: ByteBuffer) {
        if buffer.capacity == 0 { buffer.reserveCapacity(max(nextBatchCapacity, frame.readableBytes)) }
        buffer.writeImmutableBuffer(frame)
    }

    /// Queues `bytes` without copying them: they are written from their own storage, which other connections
    /// may share.
    mutating func appendShared(_ bytes: ByteBuffer) {
        if buffer.readableBytes > 0 {
            segmentBytes += buffer.readableBytes
            if buffer.capacity > max(2 * buffer.readableBytes, Self.spareCapacityLimit) {
                // A few frames in storage sized for a whole batch: they go as a copy of their size (a stopped peer
                // must not keep a batch's worth per run), and the storage is let go (nor an idle one).
                var frames = allocator.buffer(capacity: buffer.readableBytes)
                frames.writeImmutableBuffer(buffer)
                segments.append(frames)
            } else {
                segments.append(buffer)
            }
            buffer = spare.take() ?? allocator.buffer(capacity: 0)
        }
        segmentBytes += bytes.readableBytes
        segments.append(bytes)
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

    /// Storage of this queue's own written last when a hand-over ends with shared bytes: the channel has written
    /// everything once it holds no reference to it (it keeps an empty write in order, as it does any other).
    /// Made when first needed: most connections never receive a shared run.
    private var marker: ByteBuffer?

    /// What one hand-over gave the channel, until ``settleHandOver(_:)``. Hand-overs may nest (a write that fails
    /// makes NIO read the channel at once, and what is read may flush the same peer), so each keeps its own.
    struct HandOver {
        fileprivate var shared: [ByteBuffer]
        /// The own batch written last; `nil` when the marker was.
        fileprivate var own: ByteBuffer?
        /// Bytes handed over.
        let count: Int
    }

    /// Hands the unflushed bytes to `write`, segment by segment in order, counting them as in flight; then
    /// ``settleHandOver(_:)`` tells whether the channel wrote them all at once.
    mutating func handOver(_ write: (ByteBuffer) -> Void) -> HandOver {
        let count = unflushedBytes
        inFlightBytes += count
        var shared: [ByteBuffer] = []
        if !segments.isEmpty {
            swap(&shared, &segments)
            segmentBytes = 0
        }
        // The last write is always storage of this queue's own, whose references tell when the write is done.
        var own: ByteBuffer?
        if buffer.readableBytes > 0 {
            own = buffer
            // The batch belongs to the channel until it is written; the next one starts in the spare storage, or
            // in storage sized like this one once its first frame comes.
            if let spare = spare.take() {
                buffer = spare
            } else {
                nextBatchCapacity = min(max(buffer.readableBytes, 256), batchCapacityLimit)
                buffer = allocator.buffer(capacity: 0)
            }
        } else if marker == nil {
            // Storage of its own: every buffer of capacity 0 shares one.
            marker = allocator.buffer(capacity: 1)
        }
        for bytes in shared { write(bytes) }
        write(own ?? marker!)
        return HandOver(shared: shared, own: own, count: count)
    }

    /// Ends a hand-over: a write the channel completed within its call gives its own storage back for a later
    /// batch; one it did not is kept (``owedBytes(unwrittenInChannel:)``) until ``completeWrite(_:)``.
    ///
    /// - Returns: whether the channel wrote (or discarded) everything handed over: it holds none of it.
    mutating func settleHandOver(_ handOver: inout HandOver) -> Bool {
        // In place: a copy of the hand-over would be a second reference to the batch it checks.
        let completed: Bool
        if handOver.own != nil {
            completed = handOver.own!.modifyIfUniquelyOwned { $0.clear() } != nil
            if completed, spare == nil, handOver.own!.capacity <= Self.spareCapacityLimit { spare = handOver.own.take() }
        } else {
            completed = marker!.modifyIfUniquelyOwned { _ in } != nil
        }
        if completed {
            // The array's storage takes the next segments.
            if segments.isEmpty, segments.capacity == 0, handOver.shared.capacity > 0 {
                handOver.shared.removeAll(keepingCapacity: true)
                swap(&segments, &handOver.shared)
            }
        } else {
            var kept = handOver.shared
            if let own = handOver.own { kept.append(own) }
            unfinishedBatches.append((kept, .now()))
        }
        return completed
    }

    /// Records that `count` bytes handed out by ``handOver(_:)`` were written or discarded.
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
        for batch in unfinishedBatches {
            for segment in batch.segments { batches += segment.readableBytesView }
        }
        var owed = Array(batches.suffix(min(max(unwrittenInChannel, 0), batches.count)))
        for segment in segments { owed += segment.readableBytesView }
        owed += buffer.readableBytesView
        return owed
    }

    /// Forgets everything not yet handed to the channel; returns how many bytes that was.
    mutating func discardUnflushed() -> Int {
        let count = unflushedBytes
        segments.removeAll()
        segmentBytes = 0
        buffer.clear()
        return count
    }
}
