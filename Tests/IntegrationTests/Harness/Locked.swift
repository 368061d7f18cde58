import NIOConcurrencyHelpers

/// A value behind a lock, with the `withLock` shape of `Synchronization.Mutex`.
///
/// The harness uses this instead of `Mutex` because `Mutex` locks with raw futex calls that ThreadSanitizer
/// does not see, so `make sanitize` reported races that were not there; this lock is a pthread mutex.
final class Locked<Value: Sendable>: Sendable {
    private let box: NIOLockedValueBox<Value>

    init(_ value: Value) {
        box = NIOLockedValueBox(value)
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try box.withLockedValue(body)
    }
}
