import DequeModule
import NIOCore
import NotifyWire

/// Notifications a connection could not take when they were posted (it read too slowly, or it is suspended),
/// kept under each subscription's policy until it can.
///
/// A `queue` subscription keeps its notifications in chunks: consecutive notifications held back to back in
/// one buffer (a run of posts is one chunk, copied once; single posts are appended to the last chunk while
/// nothing else was held after it). Holding and releasing a run then costs a copy of its bytes and a few
/// entries, not a few entries per notification, so a connection that fell behind is not also the one that
/// costs the most. A chunk records where each of its notifications ends, so taking part of it (a queue's limit, the
/// byte bound, a release's budget) reads that index, never the held frames again; a chunk dropped whole may leave
/// its storage to the next run held, so a backlog kept at its bound cycles through the same memory.
///
/// Holding, evicting and releasing cost O(1) amortised per notification whatever the backlog: notifications
/// are held in sequence order (sequence numbers only grow), so one FIFO of entries (a coalesced name or a
/// chunk) gives the release and eviction order without sorting. An entry superseded since it was added (its
/// name coalesced again, its chunk dropped or evicted) is skipped when it reaches the front, and the FIFO is
/// compacted once such entries outnumber the live ones.
struct HeldNotifications {
    private struct Coalesced {
        var frame: ByteBuffer
        var sequence: UInt64
        var merged: UInt64
    }

    /// Consecutive notifications of one `queue` subscription, back to back in `bytes`.
    private struct Chunk {
        var id: UInt64
        var bytes: ByteBuffer
        /// Where each notification ends in `bytes` (a writer index), recorded while its bytes were at hand:
        /// taking from the front reads these, not the frames, which by then are long out of the cache (a backlog
        /// evicted by its byte bound is megabytes old). Four bytes per notification, not counted in
        /// ``HeldNotifications/bytes`` (an eighth of the smallest frame; ``HeldNotifications/storageBytes``
        /// counts them).
        private var ends: [UInt32]
        /// Entries of `ends` whose notifications were taken.
        private var taken = 0
        /// Later single posts may be appended to `bytes` in place: a single post's chunk, or a compacted one
        /// (storage this table allocated, sized to what it holds).
        var isAppendable: Bool
        /// `bytes` is storage this table allocated and nothing else refers to: it may be reused once the chunk goes.
        var ownsStorage: Bool

        /// Holds `count` frames that lie back to back in `bytes` and records where each ends.
        ///
        /// - Parameter ends: an empty array whose capacity may be reused.
        init(id: UInt64, bytes: consuming ByteBuffer, count: Int, isAppendable: Bool, ownsStorage: Bool, ends: consuming [UInt32] = []) {
            self.id = id
            self.isAppendable = isAppendable
            self.ownsStorage = ownsStorage
            self.ends = consume ends
            self.ends.reserveCapacity(count)
            self.bytes = consume bytes
            var end = self.bytes.readerIndex
            for _ in 0..<count {
                end += self.bytes.wireFrameLength(atOffset: end - self.bytes.readerIndex)
                self.ends.append(UInt32(end))
            }
        }

        /// Notifications still held.
        var count: Int { ends.count - taken }

        /// Whether taking up to `limit` notifications and `wanted` bytes takes the whole chunk.
        func fitsWhole(count limit: Int, bytes wanted: Int) -> Bool {
            limit >= count && wanted >= bytes.readableBytes
        }

        /// Bytes of storage the chunk keeps alive: its buffer and its index.
        var storageBytes: Int { bytes.storageCapacity + ends.capacity * MemoryLayout<UInt32>.stride }

        /// The chunk's storage and index, emptied, for another chunk (see ``ownsStorage``).
        consuming func emptiedStorage() -> (bytes: ByteBuffer, ends: [UInt32]) {
            bytes.clear()
            ends.removeAll(keepingCapacity: true)
            return (bytes, ends)
        }

        /// Appends one notification (the chunk must be appendable and have room).
        mutating func append(_ frame: ByteBuffer) {
            bytes.writeImmutableBuffer(frame)
            ends.append(UInt32(bytes.writerIndex))
        }

        /// Takes up to `limit` notifications from the front, stopping once `wanted` bytes were taken (at least
        /// one is taken).
        ///
        /// - Parameter compacting: copy what is left into storage of its own once most of the storage was taken,
        ///   so that what a chunk keeps alive stays within a small factor of the bytes counted (each byte is
        ///   copied O(1) times amortised). Eviction by the byte bound passes `false`: it takes only from the
        ///   connection's oldest chunk, so at most one chunk (a run: ``PostRun/byteLimit`` and its last frame;
        ///   or single posts appended up to ``HeldNotifications/chunkByteLimit``) is left partly taken by it,
        ///   and the rest of that chunk is usually the next to go; copying it would read back bytes long out of
        ///   the cache. Once few bytes are held that chunk is compacted after all
        ///   (``HeldNotifications/keepUncountedWithinCounted()``).
        mutating func takeFront(count limit: Int, bytes wanted: Int, compacting: Bool) -> (frames: ByteBuffer, count: Int, copied: Int) {
            let start = bytes.readerIndex
            var n = 1
            if fitsWhole(count: limit, bytes: wanted) {
                n = count
            } else {
                // The fewest notifications (at least one, at most `limit`) whose bytes reach `wanted`: the first
                // end at or past `start + wanted`, by bisection.
                let stop = start + Swift.min(wanted, bytes.readableBytes)
                var low = taken
                var high = taken + Swift.min(limit, count) - 1
                while low < high {
                    let middle = (low + high) / 2
                    if Int(ends[middle]) < stop { low = middle + 1 } else { high = middle }
                }
                n = low - taken + 1
            }
            taken += n
            let front = bytes.readSlice(length: Int(ends[taken - 1]) - start)!
            var copied = 0
            if count == 0 {
                ends = []
                taken = 0
            } else if compacting {
                copied = compactIfMostlyTaken()
            }
            return (front, n, copied)
        }

        /// Copies what is left into storage of its own when most of the storage was taken.
        ///
        /// - Returns: the bytes copied.
        mutating func compactIfMostlyTaken() -> Int {
            guard count > 0, bytes.readerIndex > bytes.writerIndex / 2 else { return 0 }
            var rest = ByteBufferAllocator().buffer(capacity: bytes.readableBytes)
            rest.writeImmutableBuffer(bytes)
            let shift = UInt32(bytes.readerIndex)
            ends = ends[taken...].map { $0 - shift }
            taken = 0
            bytes = rest
            isAppendable = true
            ownsStorage = true
            return bytes.readableBytes
        }
    }

    private struct Queued {
        var limit: Int
        var chunks: Deque<Chunk> = []
        /// Notifications in all chunks.
        var count = 0
        var dropped: UInt64 = 0

        /// Takes notifications from the front of the first chunk (see ``Chunk/takeFront(count:bytes:compacting:)``)
        /// and removes the chunk once it is empty.
        mutating func takeFront(count limit: Int, bytes wanted: Int, compacting: Bool) -> (frames: ByteBuffer, count: Int, copied: Int, emptiedChunk: Bool) {
            let taken = chunks[chunks.startIndex].takeFront(count: limit, bytes: wanted, compacting: compacting)
            count -= taken.count
            guard chunks[chunks.startIndex].count == 0 else { return (taken.frames, taken.count, taken.copied, false) }
            chunks.removeFirst()
            return (taken.frames, taken.count, taken.copied, true)
        }

        /// Whether the first chunk has at most `limit` notifications and `wanted` bytes.
        func firstChunkFits(count limit: Int, bytes wanted: Int) -> Bool {
            chunks[chunks.startIndex].fitsWhole(count: limit, bytes: wanted)
        }

        /// Compacts the first chunk if most of it was taken (see ``Chunk/compactIfMostlyTaken()``).
        mutating func compactFirstChunk() -> Int {
            chunks.isEmpty ? 0 : chunks[chunks.startIndex].compactIfMostlyTaken()
        }

        /// Removes the first chunk whole.
        mutating func removeFirstChunk() -> Chunk {
            let chunk = chunks.removeFirst()
            count -= chunk.count
            return chunk
        }
    }

    /// Where a held notification lives: under its name (coalesce) or in a chunk of its subscription's queue.
    private enum Slot {
        case coalesced(String)
        case queued(UInt32, chunk: UInt64)
    }

    /// Chunks to which single notifications are appended stop growing at this size.
    static let chunkByteLimit = 16 * 1024

    private var coalesced: [String: Coalesced] = [:]
    private var queues: [UInt32: Queued] = [:]
    /// Every held name or chunk in the order it was held, plus superseded entries not yet skipped or compacted.
    private var order: Deque<(sequence: UInt64, slot: Slot)> = []
    /// Entries of `order` that are still held.
    private var liveEntries = 0
    private var nextChunkID: UInt64 = 0
    /// Storage of a chunk this table allocated and discarded whole, emptied: the last such chunk that was at most
    /// ``spareCapacityLimit`` while the bytes still held covered it. The next run held is copied into it when it
    /// fits, else it is freed; it is freed too once fewer bytes are held than it holds (see
    /// ``keepUncountedWithinCounted()``). A backlog at its bound then cycles through the same memory instead of
    /// freeing and allocating (and faulting in) a chunk per run.
    private var spare: ByteBuffer?
    /// The spare's index, emptied (its capacity kept).
    private var spareEnds: [UInt32] = []
    /// Larger storage is freed, not kept as the spare: what the spare keeps alive is not counted in ``bytes``.
    static let spareCapacityLimit = 2 * PostRun.byteLimit + 1024
    /// `queue` subscriptions whose every held notification was evicted after some were dropped: their
    /// `OVERFLOW` goes out at the next release although no notification of theirs follows.
    private var emptiedWithDrops: Set<UInt32> = []
    /// Notifications evicted to respect the byte bound, not yet reported.
    private var evicted: UInt64 = 0
    /// Bytes of the frames held.
    private(set) var bytes = 0
    /// How many notifications are held.
    private(set) var count = 0
    /// Order entries examined so far (held, skipped, released, compacted): what the complexity tests bound.
    private(set) var entriesTouched = 0
    /// Held bytes copied again, to compact a chunk most of which was taken: what the eviction tests bound.
    private(set) var bytesRecopied = 0
    /// Runs held in newly allocated storage rather than the spare: what the recycling test bounds.
    private(set) var runStorageAllocations = 0
    /// Runs copied into the spare's own memory (not into a copy of it, which a second reference would force).
    private(set) var runsHeldInSpare = 0

    /// Bytes of storage the held notifications keep alive (what ``bytes`` counts, plus the unused capacity of
    /// their buffers, the chunks' indexes and the spare); O(entries), for tests and introspection.
    var storageBytes: Int {
        (spare?.capacity ?? 0) + spareEnds.capacity * MemoryLayout<UInt32>.stride
            + coalesced.values.reduce(0) { $0 + $1.frame.storageCapacity }
            + queues.values.reduce(0) { total, queue in queue.chunks.reduce(total) { $0 + $1.storageBytes } }
    }

    var isEmpty: Bool { count == 0 && evicted == 0 && emptiedWithDrops.isEmpty }

    /// Holds one notification.
    ///
    /// - Returns: how many earlier notifications it merged with (coalesce) or pushed out (queue).
    /// - Parameter alsoMerged: earlier notifications on the same name, not passed in, that this one
    ///   supersedes (a run of posts held at once keeps only its last; `coalesce` only).
    mutating func hold(
        _ frame: ByteBuffer, name: String, sequence: UInt64, policy: DeliveryPolicy, subscriptionID: UInt32,
        alsoMerged: UInt64 = 0
    ) -> (merged: UInt64, dropped: UInt64) {
        assert(order.last.map { $0.sequence < sequence } ?? true, "held out of sequence order")
        defer { keepUncountedWithinCounted() }
        switch policy {
        case .coalesce:
            let frame = Self.ownStorage(frame)
            var merged = alsoMerged
            order.append((sequence, .coalesced(name)))
            if coalesced[name] != nil {
                // In place: the entry superseded in `order` is skipped later.
                coalesced[name]!.merged += 1 + alsoMerged
                bytes += frame.readableBytes - coalesced[name]!.frame.readableBytes
                coalesced[name]!.frame = frame
                coalesced[name]!.sequence = sequence
                merged = 1 + alsoMerged
            } else {
                coalesced[name] = Coalesced(frame: frame, sequence: sequence, merged: alsoMerged)
                bytes += frame.readableBytes
                count += 1
                liveEntries += 1
            }
            entriesTouched += 1
            compactIfMostlySuperseded()
            return (merged, 0)
        case .queue(let limit):
            if let last = order.last, case .queued(subscriptionID, let chunkID) = last.slot,
                canAppend(frame.readableBytes, toChunk: chunkID, of: subscriptionID)
            {
                // Nothing was held after this subscription's last chunk: the notification joins it.
                let position = queues[subscriptionID]!.chunks.index(before: queues[subscriptionID]!.chunks.endIndex)
                queues[subscriptionID]!.chunks[position].append(frame)
                queues[subscriptionID]!.count += 1
                bytes += frame.readableBytes
                count += 1
                entriesTouched += 1
                return (0, enforceLimit(subscriptionID))
            }
            let isAppendable = frame.readableBytes < Self.chunkByteLimit / 4
            let storage: ByteBuffer
            if isAppendable {
                // Sized to the frame: appends grow it; a larger start would be memory the byte count misses.
                var copy = ByteBufferAllocator().buffer(capacity: frame.readableBytes)
                copy.writeImmutableBuffer(frame)
                storage = copy
            } else {
                storage = Self.ownStorage(frame)
            }
            return (0, holdChunk(
                Chunk(id: nextChunkID + 1, bytes: storage, count: 1, isAppendable: isAppendable, ownsStorage: isAppendable),
                firstSequence: sequence, limit: Int(limit), subscriptionID: subscriptionID))
        case .disconnect:
            preconditionFailure("disconnect-policy notifications are never held")
        }
    }

    /// Whether `subscriptionID`'s last chunk is `chunkID` and takes `size` more bytes in place. (A function, so
    /// that no copy of the chunk's buffer is alive while it is appended to: that would copy it on every append.)
    private func canAppend(_ size: Int, toChunk chunkID: UInt64, of subscriptionID: UInt32) -> Bool {
        guard let chunk = queues[subscriptionID]?.chunks.last else { return false }
        // The writer index, not the readable bytes: storage in front of the reader index is not reclaimed.
        return chunk.id == chunkID && chunk.isAppendable && chunk.bytes.writerIndex + size <= Self.chunkByteLimit
    }

    /// Holds consecutive notifications of one `queue` subscription at once.
    ///
    /// - Parameter frames: `count` frames back to back (a view of a run's buffer), copied once into storage of
    ///   this table's own.
    /// - Returns: how many notifications the queue's limit pushed out.
    mutating func holdRun(
        _ frames: ByteBuffer, count frameCount: Int, firstSequence: UInt64, limit: UInt32, subscriptionID: UInt32
    ) -> UInt64 {
        assert(order.last.map { $0.sequence < firstSequence } ?? true, "held out of sequence order")
        defer { keepUncountedWithinCounted() }
        var bytes: ByteBuffer
        var ends: [UInt32] = []
        // The spare only when it is not much larger than the run (its capacity is memory the byte count misses);
        // one that does not fit is freed, not kept for a later run.
        if let capacity = spare?.capacity, capacity >= frames.readableBytes, capacity <= 2 * frames.readableBytes + 1024 {
            bytes = spare.take()!
            swap(&ends, &spareEnds)
            let base = bytes.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
            bytes.writeImmutableBuffer(frames)
            if bytes.withUnsafeReadableBytes({ UInt(bitPattern: $0.baseAddress) }) == base { runsHeldInSpare += 1 }
        } else {
            spare = nil
            spareEnds = []
            bytes = ByteBufferAllocator().buffer(capacity: frames.readableBytes)
            runStorageAllocations += 1
            bytes.writeImmutableBuffer(frames)
        }
        return holdChunk(
            Chunk(id: nextChunkID + 1, bytes: consume bytes, count: frameCount, isAppendable: false, ownsStorage: true, ends: consume ends),
            firstSequence: firstSequence, limit: Int(limit), subscriptionID: subscriptionID)
    }

    /// Holds a chunk made with the next chunk ID.
    private mutating func holdChunk(_ chunk: Chunk, firstSequence: UInt64, limit: Int, subscriptionID: UInt32) -> UInt64 {
        nextChunkID += 1
        assert(chunk.id == nextChunkID)
        let frameCount = chunk.count
        let size = chunk.bytes.readableBytes
        order.append((firstSequence, .queued(subscriptionID, chunk: chunk.id)))
        // Mutated in place through the subscript: taking the queue out and storing it back copied it.
        queues[subscriptionID, default: Queued(limit: limit)].chunks.append(chunk)
        queues[subscriptionID]!.count += frameCount
        bytes += size
        count += frameCount
        liveEntries += 1
        if !emptiedWithDrops.isEmpty { emptiedWithDrops.remove(subscriptionID) }
        entriesTouched += 1
        let dropped = enforceLimit(subscriptionID)
        compactIfMostlySuperseded()
        return dropped
    }

    /// Drops a queue's oldest notifications beyond its limit; returns how many.
    private mutating func enforceLimit(_ id: UInt32) -> UInt64 {
        var excess = queues[id]!.count - Swift.max(queues[id]!.limit, 1)
        guard excess > 0 else { return 0 }
        let total = excess
        while excess > 0 {
            excess -= discardFront(id, count: excess, bytes: .max, compacting: true).count
        }
        queues[id]!.dropped += UInt64(total)
        return UInt64(total)
    }

    /// Drops notifications from the front of a queue and accounts for them: a whole chunk without reading it (its
    /// storage possibly kept as the spare), else as ``takeFront(_:count:bytes:compacting:)``.
    private mutating func discardFront(_ id: UInt32, count limit: Int, bytes wanted: Int, compacting: Bool) -> (count: Int, bytes: Int) {
        guard queues[id]!.firstChunkFits(count: limit, bytes: wanted) else {
            let taken = takeFront(id, count: limit, bytes: wanted, compacting: compacting)
            return (taken.count, taken.frames.readableBytes)
        }
        let chunk = queues[id]!.removeFirstChunk()
        let gone = (count: chunk.count, bytes: chunk.bytes.readableBytes)
        count -= gone.count
        bytes -= gone.bytes
        liveEntries -= 1
        // Kept only while the bytes still held cover it: what is not counted stays within what is.
        if chunk.ownsStorage, chunk.bytes.capacity <= Self.spareCapacityLimit, chunk.bytes.capacity <= bytes {
            (spare, spareEnds) = (consume chunk).emptiedStorage()
        }
        return gone
    }

    /// Takes notifications from the front of a queue and accounts for them.
    private mutating func takeFront(_ id: UInt32, count limit: Int, bytes wanted: Int, compacting: Bool) -> (frames: ByteBuffer, count: Int) {
        let taken = queues[id]!.takeFront(count: limit, bytes: wanted, compacting: compacting)
        count -= taken.count
        bytes -= taken.frames.readableBytes
        bytesRecopied += taken.copied
        if taken.emptiedChunk { liveEntries -= 1 }
        return (taken.frames, taken.count)
    }

    /// `frame` itself, or a copy when it is a small part of a larger buffer (a run of posts): a held frame must
    /// not keep a whole run's storage alive, or held memory would no longer be bounded by the bytes counted.
    private static func ownStorage(_ frame: ByteBuffer) -> ByteBuffer {
        guard frame.storageCapacity > 2 * frame.readableBytes + 64 else { return frame }
        var copy = ByteBufferAllocator().buffer(capacity: frame.readableBytes)
        copy.writeImmutableBuffer(frame)
        return copy
    }

    /// Whether `entry` still stands for held notifications.
    private func isLive(_ entry: (sequence: UInt64, slot: Slot)) -> Bool {
        switch entry.slot {
        case .coalesced(let name): coalesced[name]?.sequence == entry.sequence
        // Chunks leave a queue only from its front, so those still held are the ones from its first on.
        case .queued(let id, let chunk): queues[id]?.chunks.first.map { $0.id <= chunk } ?? false
        }
    }

    /// Removes superseded entries from the front of `order`, so that its first entry (if any) is held.
    private mutating func skipSuperseded() {
        while let first = order.first, !isLive(first) {
            order.removeFirst()
            entriesTouched += 1
        }
    }

    /// Rebuilds `order` without its superseded entries once they are more than the live ones: each entry is
    /// removed at most once, so this is O(1) amortised per notification held.
    private mutating func compactIfMostlySuperseded() {
        guard order.count > 2 * liveEntries + 64 else { return }
        entriesTouched += order.count
        order = Deque(order.filter { isLive($0) })
    }

    /// Drops the oldest held notifications until at least `wanted` bytes are freed or nothing is held.
    ///
    /// - Returns: how many notifications that loses.
    mutating func evictOldest(bytes wanted: Int = 1) -> UInt64 {
        var lost: UInt64 = 0
        var freed = 0
        while freed < wanted {
            skipSuperseded()
            guard let oldest = order.first else { break }
            entriesTouched += 1
            switch oldest.slot {
            case .coalesced(let name):
                order.removeFirst()
                let entry = coalesced.removeValue(forKey: name)!
                bytes -= entry.frame.readableBytes
                freed += entry.frame.readableBytes
                count -= 1
                liveEntries -= 1
                lost += entry.merged + 1
            case .queued(let id, _):
                let gone = discardFront(id, count: .max, bytes: wanted - freed, compacting: false)
                freed += gone.bytes
                lost += UInt64(gone.count)
                if queues[id]!.chunks.isEmpty {
                    order.removeFirst()
                    if queues[id]!.dropped > 0 { emptiedWithDrops.insert(id) } else { queues[id] = nil }
                }
            }
        }
        evicted += lost
        keepUncountedWithinCounted()
        return lost
    }

    /// Eviction by the byte bound leaves the oldest chunk's taken front in place and a spare may be kept, neither
    /// of them counted in ``bytes``: fine while at least ``spareCapacityLimit`` bytes are held, not once fewer are
    /// (eviction by a user's quota, a limit, a release or a smaller coalesced frame took the rest). Then a spare
    /// larger than what is held goes and the oldest chunk is compacted, so that what is not counted stays within
    /// what is. Run after every operation that changes ``bytes``; one comparison unless few bytes are held.
    private mutating func keepUncountedWithinCounted() {
        guard bytes < Self.spareCapacityLimit else { return }
        if let capacity = spare?.capacity, capacity > bytes {
            spare = nil
            spareEnds = []
        }
        skipSuperseded()
        guard let oldest = order.first, case .queued(let id, _) = oldest.slot else { return }
        bytesRecopied += queues[id]!.compactFirstChunk()
    }

    /// Moves held notifications, oldest first, into `buffer` while fewer than `budget` bytes were written.
    /// `OVERFLOW` notices precede the notifications that follow a loss; coalesced notifications that absorbed
    /// others go out as `NOTIFICATION_MERGED`.
    mutating func release(into buffer: inout ByteBuffer, budget: Int) {
        defer { keepUncountedWithinCounted() }
        let start = buffer.writerIndex
        if evicted > 0 {
            ServerFrame.overflow(subscriptionID: 0, droppedCount: evicted).encode(into: &buffer)
            evicted = 0
        }
        for id in emptiedWithDrops.sorted() {
            if let dropped = queues.removeValue(forKey: id)?.dropped, dropped > 0 {
                ServerFrame.overflow(subscriptionID: id, droppedCount: dropped).encode(into: &buffer)
            }
        }
        emptiedWithDrops.removeAll()
        while buffer.writerIndex - start < budget {
            skipSuperseded()
            guard let next = order.first else { break }
            entriesTouched += 1
            switch next.slot {
            case .coalesced(let name):
                order.removeFirst()
                let entry = coalesced.removeValue(forKey: name)!
                bytes -= entry.frame.readableBytes
                count -= 1
                liveEntries -= 1
                if entry.merged > 0 {
                    NotificationFrame.writeMerged(entry.frame, mergedCount: entry.merged, into: &buffer)
                } else {
                    buffer.writeImmutableBuffer(entry.frame)
                }
            case .queued(let id, _):
                if queues[id]!.dropped > 0 {
                    ServerFrame.overflow(subscriptionID: id, droppedCount: queues[id]!.dropped).encode(into: &buffer)
                    queues[id]!.dropped = 0
                }
                // The whole chunk when it fits the budget, else the notifications that do: at least one, also
                // when the OVERFLOW above used up the budget (it must come right before one of them).
                let taken = takeFront(id, count: .max, bytes: Swift.max(1, budget - (buffer.writerIndex - start)), compacting: true)
                buffer.writeImmutableBuffer(taken.frames)
                if queues[id]!.chunks.isEmpty {
                    order.removeFirst()
                    queues[id] = nil
                }
            }
        }
        if count == 0 { order.removeAll() }
    }
}
