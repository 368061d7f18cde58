import NIOConcurrencyHelpers

/// An asynchronous sequence of the notifications posted under one name.
///
/// Created by ``NotifyCenter/notifications(named:bufferLimit:)``. Its buffer is bounded: when the consumer
/// falls more than `bufferLimit` notifications behind, the oldest buffered one is dropped, and
/// ``droppedCount`` says how many were dropped so far.
public struct NotificationSequence: AsyncSequence, Sendable {
    /// Each element is one notification, as an observation's handler would get it.
    public typealias Element = ReceivedNotification

    /// Owns the observation; when the sequence and its iterators are gone, the observation is cancelled.
    final class Subscription: Sendable {
        let observation: Observation
        let stream: AsyncStream<ReceivedNotification>
        let continuation: AsyncStream<ReceivedNotification>.Continuation
        let dropped: NIOLockedValueBox<UInt64>
        /// Ends the stream when the center closes (its connection-event stream finishes then).
        let closeWatch: Task<Void, Never>

        init(
            observation: Observation, stream: AsyncStream<ReceivedNotification>,
            continuation: AsyncStream<ReceivedNotification>.Continuation, dropped: NIOLockedValueBox<UInt64>,
            closeWatch: Task<Void, Never>
        ) {
            self.observation = observation
            self.stream = stream
            self.continuation = continuation
            self.dropped = dropped
            self.closeWatch = closeWatch
        }

        /// Stops the observation; the stream ends once its buffered notifications are consumed.
        func end() {
            observation.cancel()
            continuation.finish()
            closeWatch.cancel()
        }

        deinit {
            closeWatch.cancel()
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
        let events = center.connectionEvents()
        let closeWatch = Task {
            for await _ in events {}
            continuation.finish()
        }
        let subscription = Subscription(
            observation: observation, stream: stream, continuation: continuation, dropped: dropped,
            closeWatch: closeWatch)
        continuation.onTermination = { [weak subscription] (_: AsyncStream<ReceivedNotification>.Continuation.Termination) in
            subscription?.observation.cancel()
            subscription?.closeWatch.cancel()
        }
        self.subscription = subscription
    }

    /// The observed name.
    public var name: String { subscription.observation.name }

    /// How many notifications were dropped because the consumer fell behind by more than the buffer limit.
    public var droppedCount: UInt64 { subscription.dropped.withLockedValue { $0 } }

    /// Stops the subscription; iteration ends after the buffered notifications. Closing the center ends it too.
    public func cancel() { subscription.end() }

    /// Makes an iterator over the notifications; iterate once (all iterators share one buffer).
    public func makeAsyncIterator() -> Iterator {
        Iterator(subscription: subscription, base: subscription.stream.makeAsyncIterator())
    }

    /// The iterator of a ``NotificationSequence``.
    public struct Iterator: AsyncIteratorProtocol {
        let subscription: Subscription
        var base: AsyncStream<ReceivedNotification>.Iterator

        /// The next notification, waiting for one if none is buffered; `nil` once the sequence was cancelled
        /// (or its center closed) and the buffer is empty.
        public mutating func next() async -> ReceivedNotification? {
            await base.next()
        }
    }
}
