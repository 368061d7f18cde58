/// One observation's notifications of a read burst, handed to the observation's executor as one job that consumes
/// it once.
///
/// Each notification is moved out to the handler. Read from an array, every one was copied for the call and the
/// copy destroyed after it: a retain and a release of its payload block per notification on the handler's thread.
/// `@unchecked Sendable`: made on the I/O thread from a ``Builder``, then consumed by the job that the executor
/// runs after the hand-over; never used by two threads at once.
final class NotificationBatch: @unchecked Sendable {
    private let elements: UnsafeMutablePointer<ReceivedNotification>
    /// Notifications in the batch.
    let count: Int
    /// Their payload bytes in all.
    let payloadBytes: Int
    /// Notifications moved out to the handler (the first `consumed` slots are uninitialized).
    private var consumed = 0

    private init(elements: UnsafeMutablePointer<ReceivedNotification>, count: Int, payloadBytes: Int) {
        self.elements = elements
        self.count = count
        self.payloadBytes = payloadBytes
    }

    deinit {
        // A batch cut short (its observation cancelled) still holds the rest.
        (elements + consumed).deinitialize(count: count - consumed)
        elements.deallocate()
    }

    /// Moves each notification not yet consumed, in order, to `body`, stopping early when `shouldContinue` says so
    /// (checked before each one).
    func consumeEach(while shouldContinue: () -> Bool, _ body: (ReceivedNotification) -> Void) {
        var next = consumed
        defer { consumed = next }
        while next < count, shouldContinue() {
            let notification = (elements + next).move()
            next += 1
            body(notification)
        }
    }

    /// A batch being filled: plain storage, no object, so that appending changes no reference count (a reference
    /// to the batch object taken per notification was a retain and a release each).
    ///
    /// Owns its notifications until ``take()``; whoever holds a builder with notifications in it must take or
    /// ``discard()`` them.
    struct Builder {
        private var elements: UnsafeMutablePointer<ReceivedNotification>?
        private var capacity = 0
        /// Notifications appended since the last ``take()``.
        private(set) var count = 0
        /// Their payload bytes.
        private var payloadBytes = 0

        /// Appends `notification`; the first one allocates room for `expected`, and a full builder doubles.
        mutating func append(_ notification: consuming ReceivedNotification, expected: Int) {
            if count == capacity {
                let larger = UnsafeMutablePointer<ReceivedNotification>.allocate(capacity: max(2 * capacity, expected, 1))
                if let elements {
                    larger.moveInitialize(from: elements, count: count)
                    elements.deallocate()
                }
                elements = larger
                capacity = max(2 * capacity, expected, 1)
            }
            payloadBytes &+= notification.payloadCount
            (elements! + count).initialize(to: notification)
            count += 1
        }

        /// The notifications appended so far as a batch (`nil` if none); the builder is empty afterwards.
        mutating func take() -> NotificationBatch? {
            guard let elements, count > 0 else { return nil }
            let batch = NotificationBatch(elements: elements, count: count, payloadBytes: payloadBytes)
            self.elements = nil
            capacity = 0
            count = 0
            payloadBytes = 0
            return batch
        }

        /// Destroys the notifications appended so far and frees their storage.
        mutating func discard() {
            guard let elements else { return }
            elements.deinitialize(count: count)
            elements.deallocate()
            self.elements = nil
            capacity = 0
            count = 0
            payloadBytes = 0
        }
    }
}
