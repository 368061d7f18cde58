import NIOConcurrencyHelpers

/// An asynchronous sequence of the notifications posted under one name.
///
/// Created by ``NotifyCenter/notifications(named:bufferLimit:)``. Its buffer is bounded: when the consumer
/// falls more than `bufferLimit` notifications behind, the oldest buffered one is dropped, and
/// ``droppedCount`` says how many were dropped so far.
public struct NotificationSequence: AsyncSequence, Sendable {
    public typealias Element = ReceivedNotification

    /// Owns the observation; when the sequence and its iterators are gone, the observation is cancelled.
    final class Subscription: Sendable {
        let observation: Observation
        let stream: AsyncStream<ReceivedNotification>
        let dropped: NIOLockedValueBox<UInt64>

        init(observation: Observation, stream: AsyncStream<ReceivedNotification>, dropped: NIOLockedValueBox<UInt64>) {
            self.observation = observation
            self.stream = stream
            self.dropped = dropped
        }
    }

    private let subscription: Subscription

    init(center: NotifyCenter, name: String, bufferLimit: Int) throws {
        let (stream, continuation) = AsyncStream<ReceivedNotification>.makeStream(
            bufferingPolicy: .bufferingNewest(Swift.max(1, bufferLimit)))
        let dropped = NIOLockedValueBox<UInt64>(0)
        let observation = try center.observe(name, on: .immediate) { notification in
            if case .dropped = continuation.yield(notification) {
                dropped.withLockedValue { $0 += 1 }
            }
        }
        let subscription = Subscription(observation: observation, stream: stream, dropped: dropped)
        continuation.onTermination = { [weak subscription] (_: AsyncStream<ReceivedNotification>.Continuation.Termination) in
            subscription?.observation.cancel()
        }
        self.subscription = subscription
    }

    /// The observed name.
    public var name: String { subscription.observation.name }

    /// How many notifications were dropped because the consumer fell behind by more than the buffer limit.
    public var droppedCount: UInt64 { subscription.dropped.withLockedValue { $0 } }

    /// Stops the subscription; iteration ends after the buffered notifications.
    public func cancel() { subscription.observation.cancel() }

    public func makeAsyncIterator() -> Iterator {
        Iterator(subscription: subscription, base: subscription.stream.makeAsyncIterator())
    }

    /// The iterator of a ``NotificationSequence``.
    public struct Iterator: AsyncIteratorProtocol {
        let subscription: Subscription
        var base: AsyncStream<ReceivedNotification>.Iterator

        public mutating func next() async -> ReceivedNotification? {
            await base.next()
        }
    }
}
