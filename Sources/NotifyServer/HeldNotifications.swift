import DequeModule
import NIOCore
import NotifyWire

/// Notifications a connection could not take when they were posted (it read too slowly, or it is suspended),
/// kept under each subscription's policy until it can.
///
/// Frames are the shared encoded bytes of each post: holding one costs a reference, not a copy (except for
/// frames cut from a run of posts, see ``ownStorage(_:)``).
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
    }

    private var coalesced: [String: Coalesced] = [:]
    private var queues: [UInt32: Queued] = [:]
    /// Notifications evicted to respect the byte bound, not yet reported.
    private var evicted: UInt64 = 0
    /// Bytes of the frames held.
    private(set) var bytes = 0

    var isEmpty: Bool { coalesced.isEmpty && queues.values.allSatisfy { $0.frames.isEmpty && $0.dropped == 0 } && evicted == 0 }

    /// Holds one notification.
    ///
    /// - Returns: how many earlier notifications it merged with (coalesce) or pushed out (queue).
    /// - Parameter alsoMerged: earlier notifications on the same name, not passed in, that this one
    ///   supersedes (a run of posts held at once keeps only its last; `coalesce` only).
    mutating func hold(
        _ frame: ByteBuffer, name: String, sequence: UInt64, policy: DeliveryPolicy, subscriptionID: UInt32,
        alsoMerged: UInt64 = 0
    ) -> (merged: UInt64, dropped: UInt64) {
        let frame = Self.ownStorage(frame)
        switch policy {
        case .coalesce:
            if var entry = coalesced[name] {
                bytes += frame.readableBytes - entry.frame.readableBytes
                entry.frame = frame
                entry.sequence = sequence
                entry.merged += 1 + alsoMerged
                coalesced[name] = entry
                return (1 + alsoMerged, 0)
            }
            coalesced[name] = Coalesced(frame: frame, sequence: sequence, merged: alsoMerged)
            bytes += frame.readableBytes
            return (alsoMerged, 0)
        case .queue(let limit):
            var queue = queues[subscriptionID] ?? Queued(limit: Int(limit))
            var dropped: UInt64 = 0
            if queue.frames.count >= queue.limit, let oldest = queue.frames.popFirst() {
                bytes -= oldest.frame.readableBytes
                queue.dropped += 1
                dropped = 1
            }
            queue.frames.append((frame, sequence))
            bytes += frame.readableBytes
            queues[subscriptionID] = queue
            return (0, dropped)
        case .disconnect:
            preconditionFailure("disconnect-policy notifications are never held")
        }
    }

    /// `frame` itself, or a copy when it is a small part of a larger buffer (a run of posts): a held frame must
    /// not keep a whole run's storage alive, or held memory would no longer be bounded by the bytes counted.
    private static func ownStorage(_ frame: ByteBuffer) -> ByteBuffer {
        guard frame.storageCapacity > 2 * frame.readableBytes + 64 else { return frame }
        var copy = ByteBufferAllocator().buffer(capacity: frame.readableBytes)
        copy.writeImmutableBuffer(frame)
        return copy
    }

    /// Drops the oldest held notification to make room. Returns how many notifications that loses.
    mutating func evictOldest() -> UInt64 {
        var oldest: (sequence: UInt64, name: String?, queue: UInt32?)?
        for (name, entry) in coalesced where oldest == nil || entry.sequence < oldest!.sequence {
            oldest = (entry.sequence, name, nil)
        }
        for (id, queue) in queues {
            if let first = queue.frames.first, oldest == nil || first.sequence < oldest!.sequence {
                oldest = (first.sequence, nil, id)
            }
        }
        guard let oldest else { return 0 }
        let lost: UInt64
        if let name = oldest.name, let entry = coalesced.removeValue(forKey: name) {
            bytes -= entry.frame.readableBytes
            lost = entry.merged + 1
        } else if let id = oldest.queue, let first = queues[id]?.frames.popFirst() {
            bytes -= first.frame.readableBytes
            lost = 1
        } else {
            return 0
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
        var order: [(sequence: UInt64, name: String?, queue: UInt32?)] = []
        order.reserveCapacity(coalesced.count)
        for (name, entry) in coalesced { order.append((entry.sequence, name, nil)) }
        for (id, queue) in queues {
            for item in queue.frames { order.append((item.sequence, nil, id)) }
            if queue.frames.isEmpty && queue.dropped > 0 {
                ServerFrame.overflow(subscriptionID: id, droppedCount: queue.dropped).encode(into: &buffer)
                queues[id]?.dropped = 0
            }
        }
        order.sort { $0.sequence < $1.sequence }
        for item in order {
            if buffer.writerIndex - start >= budget { break }
            if let name = item.name, let entry = coalesced.removeValue(forKey: name) {
                bytes -= entry.frame.readableBytes
                if entry.merged > 0 {
                    Self.writeMerged(entry.frame, mergedCount: entry.merged, into: &buffer)
                } else {
                    buffer.writeImmutableBuffer(entry.frame)
                }
            } else if let id = item.queue, var queue = queues[id], let first = queue.frames.popFirst() {
                if queue.dropped > 0 {
                    ServerFrame.overflow(subscriptionID: id, droppedCount: queue.dropped).encode(into: &buffer)
                    queue.dropped = 0
                }
                bytes -= first.frame.readableBytes
                buffer.writeImmutableBuffer(first.frame)
                queues[id] = queue.frames.isEmpty && queue.dropped == 0 ? nil : queue
            }
        }
    }

    /// Rewrites a `NOTIFICATION` frame as `NOTIFICATION_MERGED`: same fields after a `merged_count`.
    private static func writeMerged(_ frame: ByteBuffer, mergedCount: UInt64, into buffer: inout ByteBuffer) {
        let headerLength = ProtocolConstants.lengthPrefixSize + 1
        let fields = frame.getSlice(at: frame.readerIndex + headerLength, length: frame.readableBytes - headerLength)!
        buffer.writeInteger(UInt32(1 + 8 + fields.readableBytes))
        buffer.writeInteger(MessageType.notificationMerged.rawValue)
        buffer.writeInteger(mergedCount)
        buffer.writeImmutableBuffer(fields)
    }
}
