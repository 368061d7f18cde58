import DequeModule
import NIOCore
import NotifyWire

/// Notifications a connection could not take when they were posted (it read too slowly, or it is suspended),
/// kept under each subscription's policy until it can.
///
/// Frames are the shared encoded bytes of each post: holding one costs a reference, not a copy (except for
/// frames cut from a run of posts, see ``ownStorage(_:)``).
///
/// Holding, evicting and releasing cost O(1) amortised per notification whatever the backlog: notifications
/// are held in sequence order (sequence numbers only grow), so one FIFO of entries gives the release and
/// eviction order without sorting. An entry superseded since it was added (its name coalesced again, its
/// queued notification dropped or evicted) is skipped when it reaches the front, and the FIFO is compacted
/// once such entries outnumber the live ones.
struct HeldNotifications {
    private struct Coalesced {
        var frame: ByteBuffer
        var sequence: UInt64
        var merged: UInt64
    }

    private struct Queued {
        var limit: Int
        var frames: Deque<(frame: ByteBuffer, sequence: UInt64)> = []
        var dropped: UInt64 = 0

        /// Appends a notification; when that makes one too many, drops the oldest and returns its size.
        mutating func push(_ frame: ByteBuffer, sequence: UInt64) -> Int? {
            frames.append((frame, sequence))
            guard frames.count > Swift.max(limit, 1), let oldest = frames.popFirst() else { return nil }
            dropped += 1
            return oldest.frame.readableBytes
        }

        /// Writes the oldest notification, after the `OVERFLOW` its subscription owes; returns its size.
        mutating func releaseFirst(into buffer: inout ByteBuffer, subscriptionID: UInt32) -> Int {
            if dropped > 0 {
                ServerFrame.overflow(subscriptionID: subscriptionID, droppedCount: dropped).encode(into: &buffer)
                dropped = 0
            }
            let first = frames.removeFirst()
            buffer.writeImmutableBuffer(first.frame)
            return first.frame.readableBytes
        }
    }

    /// Where a held notification lives: under its name (coalesce) or in its subscription's queue.
    private enum Slot {
        case coalesced(String)
        case queued(UInt32)
    }

    private var coalesced: [String: Coalesced] = [:]
    private var queues: [UInt32: Queued] = [:]
    /// Every held notification in the order it was held, plus superseded entries not yet skipped or compacted.
    private var order: Deque<(sequence: UInt64, slot: Slot)> = []
    /// Entries of `order` that are still held.
    private var liveCount = 0
    /// `queue` subscriptions whose every held notification was evicted after some were dropped: their
    /// `OVERFLOW` goes out at the next release although no notification of theirs follows.
    private var emptiedWithDrops: Set<UInt32> = []
    /// Notifications evicted to respect the byte bound, not yet reported.
    private var evicted: UInt64 = 0
    /// Bytes of the frames held.
    private(set) var bytes = 0
    /// Order entries examined so far (held, skipped, released, compacted): what the complexity tests bound.
    private(set) var entriesTouched = 0

    var isEmpty: Bool { liveCount == 0 && evicted == 0 && emptiedWithDrops.isEmpty }

    /// How many notifications are held.
    var count: Int { liveCount }

    /// Holds one notification.
    ///
    /// - Returns: how many earlier notifications it merged with (coalesce) or pushed out (queue).
    /// - Parameter alsoMerged: earlier notifications on the same name, not passed in, that this one
    ///   supersedes (a run of posts held at once keeps only its last; `coalesce` only).
    /// - Parameter storageIsOwned: `frame`'s storage holds nothing but notifications held here (a run's
    ///   frames copied once for a slow connection), so it is kept as it is rather than copied.
    mutating func hold(
        _ frame: ByteBuffer, name: String, sequence: UInt64, policy: DeliveryPolicy, subscriptionID: UInt32,
        alsoMerged: UInt64 = 0, storageIsOwned: Bool = false
    ) -> (merged: UInt64, dropped: UInt64) {
        assert(order.last.map { $0.sequence < sequence } ?? true, "held out of sequence order")
        let frame = storageIsOwned ? frame : Self.ownStorage(frame)
        var result: (merged: UInt64, dropped: UInt64) = (alsoMerged, 0)
        switch policy {
        case .coalesce:
            order.append((sequence, .coalesced(name)))
            if coalesced[name] != nil {
                // In place: the entry superseded in `order` is skipped later.
                coalesced[name]!.merged += 1 + alsoMerged
                bytes += frame.readableBytes - coalesced[name]!.frame.readableBytes
                coalesced[name]!.frame = frame
                coalesced[name]!.sequence = sequence
                result.merged = 1 + alsoMerged
            } else {
                coalesced[name] = Coalesced(frame: frame, sequence: sequence, merged: alsoMerged)
                bytes += frame.readableBytes
                liveCount += 1
            }
        case .queue(let limit):
            order.append((sequence, .queued(subscriptionID)))
            liveCount += 1
            bytes += frame.readableBytes
            // Mutated in place through the subscript: taking the queue out and storing it back copied it.
            if let droppedBytes = queues[subscriptionID, default: Queued(limit: Int(limit))].push(frame, sequence: sequence) {
                bytes -= droppedBytes
                liveCount -= 1
                result.dropped = 1
            }
            if !emptiedWithDrops.isEmpty { emptiedWithDrops.remove(subscriptionID) }
        case .disconnect:
            preconditionFailure("disconnect-policy notifications are never held")
        }
        entriesTouched += 1
        compactIfMostlySuperseded()
        return result
    }

    /// `frame` itself, or a copy when it is a small part of a larger buffer (a run of posts): a held frame must
    /// not keep a whole run's storage alive, or held memory would no longer be bounded by the bytes counted.
    private static func ownStorage(_ frame: ByteBuffer) -> ByteBuffer {
        guard frame.storageCapacity > 2 * frame.readableBytes + 64 else { return frame }
        var copy = ByteBufferAllocator().buffer(capacity: frame.readableBytes)
        copy.writeImmutableBuffer(frame)
        return copy
    }

    /// Whether `entry` still stands for a held notification.
    private func isLive(_ entry: (sequence: UInt64, slot: Slot)) -> Bool {
        switch entry.slot {
        case .coalesced(let name): coalesced[name]?.sequence == entry.sequence
        case .queued(let id): queues[id]?.frames.first?.sequence == entry.sequence
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
        guard order.count > 2 * liveCount + 64 else { return }
        entriesTouched += order.count
        var positions: [UInt32: Int] = [:]
        order = Deque(
            order.filter { entry in
                switch entry.slot {
                case .coalesced(let name):
                    return coalesced[name]?.sequence == entry.sequence
                case .queued(let id):
                    // A queue's live frames are its last entries in `order`, in the same order.
                    guard let queue = queues[id] else { return false }
                    let position = positions[id, default: 0]
                    guard position < queue.frames.count,
                        queue.frames[queue.frames.startIndex + position].sequence == entry.sequence
                    else { return false }
                    positions[id] = position + 1
                    return true
                }
            })
    }

    /// Drops the oldest held notification to make room. Returns how many notifications that loses.
    mutating func evictOldest() -> UInt64 {
        skipSuperseded()
        guard let oldest = order.popFirst() else { return 0 }
        entriesTouched += 1
        liveCount -= 1
        let lost: UInt64
        switch oldest.slot {
        case .coalesced(let name):
            let entry = coalesced.removeValue(forKey: name)!
            bytes -= entry.frame.readableBytes
            lost = entry.merged + 1
        case .queued(let id):
            let first = queues[id]!.frames.removeFirst()
            bytes -= first.frame.readableBytes
            lost = 1
            if queues[id]!.frames.isEmpty {
                if queues[id]!.dropped > 0 { emptiedWithDrops.insert(id) } else { queues[id] = nil }
            }
        }
        evicted += lost
        return lost
    }

    /// Moves held notifications, oldest first, into `buffer` while fewer than `budget` bytes were written.
    /// `OVERFLOW` notices precede the notifications that follow a loss; coalesced notifications that absorbed
    /// others go out as `NOTIFICATION_MERGED`.
    mutating func release(into buffer: inout ByteBuffer, budget: Int) {
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
            guard let next = order.popFirst() else { break }
            entriesTouched += 1
            liveCount -= 1
            switch next.slot {
            case .coalesced(let name):
                let entry = coalesced.removeValue(forKey: name)!
                bytes -= entry.frame.readableBytes
                if entry.merged > 0 {
                    NotificationFrame.writeMerged(entry.frame, mergedCount: entry.merged, into: &buffer)
                } else {
                    buffer.writeImmutableBuffer(entry.frame)
                }
            case .queued(let id):
                bytes -= queues[id]!.releaseFirst(into: &buffer, subscriptionID: id)
                if queues[id]!.frames.isEmpty { queues[id] = nil }
            }
        }
        if liveCount == 0 { order.removeAll() }
    }
}
