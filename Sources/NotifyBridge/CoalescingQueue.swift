import NIOConcurrencyHelpers
import OrderedCollections

/// Values waiting for one consumer, the latest per key, keys in the order they first waited: however fast values
/// come and however long the consumer is held up (the local daemon down), it holds at most one per key.
///
/// The bucket mirror applies entries through it: a key-value bucket's later value of a key replaces an earlier one,
/// so an entry not applied yet has nothing left to say once a newer one came.
package final class CoalescingQueue<Value: Sendable>: Sendable {
    private let waiting = NIOLockedValueBox(OrderedDictionary<String, Value>())
    private let wake = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))

    /// An empty queue.
    package init() {}

    /// Keys waiting now.
    package var count: Int { waiting.withLockedValue { $0.count } }

    /// Queues `value` under `key`, replacing one waiting there (which keeps its place).
    package func put(_ value: Value, for key: String) {
        waiting.withLockedValue { $0[key] = value }
        wake.continuation.yield()
    }

    /// The first key waiting and its latest value; waits for one, and returns `nil` once ``finish()`` was called
    /// and nothing waits, or when the task is cancelled (which ends the waiting for good: one consumer, once).
    package func next() async -> (key: String, value: Value)? {
        var wakes = wake.stream.makeAsyncIterator()
        while true {
            if let first = waiting.withLockedValue({ $0.isEmpty ? nil : $0.removeFirst() }) { return first }
            guard await wakes.next() != nil else { return nil }
        }
    }

    /// Ends the queue: ``next()`` returns what still waits, then `nil`.
    package func finish() {
        wake.continuation.finish()
    }
}
