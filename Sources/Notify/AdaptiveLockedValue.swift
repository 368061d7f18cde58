#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value behind a mutex that, when contended, spins briefly before putting the caller to sleep.
///
/// The center's state is locked by the posting threads and by its I/O thread for a few hundred nanoseconds
/// at a time. With a plain mutex, every collision put a thread to sleep in the kernel and woke it again (a
/// context switch each way, many times the length of the critical section); glibc's adaptive mutex waits the
/// holder out on the CPU first. Elsewhere (Musl, other platforms) it is an ordinary mutex.
final class AdaptiveLockedValue<Value> {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    // Behind a pointer rather than in a stored property: every access happens under the mutex, and a stored
    // `var` would add a run-time exclusivity check to each one.
    private let value: UnsafeMutablePointer<Value>

    init(_ initial: Value) {
        mutex = .allocate(capacity: 1)
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        #if canImport(Glibc)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        #endif
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
        value = .allocate(capacity: 1)
        value.initialize(to: initial)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    func withLockedValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}

// The value is only reached through `withLockedValue`, which holds the mutex; the pointers never change.
extension AdaptiveLockedValue: @unchecked Sendable where Value: Sendable {}
