import Atomics
import Foundation

/// Guards one observation's handler so that once ``close()`` returns, no new invocation starts.
///
/// An invocation enters the gate before calling the handler and leaves it after. `close()` marks the gate
/// closed and then waits for an invocation already inside to leave, unless `close()` is called from that
/// invocation itself (cancelling from inside a handler), which must not wait for itself.
///
/// Invocations from two threads never overlap: an `.immediate` handler runs on whichever thread delivers (the I/O
/// thread, or a thread posting a `self.` name), and the second waits at the gate for the first to leave. A thread
/// already inside may enter again (a handler posting a `self.` name its own observation matches).
final class HandlerGate: Sendable {
    // The condition's lock orders every change of the two values below and lets `close()` wait for an
    // invocation to leave. They are atomics so that the compiler, not a comment, vouches for the sharing;
    // written only under the lock, they cost no more than plain stores.
    private let condition = NSCondition()
    /// Whether ``close()`` was called; readable without the lock: a batch checks it before each invocation.
    private let closedFlag = ManagedAtomic(false)
    /// The thread running an invocation (see ``currentThread``), or 0.
    private let activeThread = ManagedAtomic<UInt>(0)
    /// How deep that thread is inside (a handler that delivers to its own observation enters again).
    private let depth = ManagedAtomic<Int>(0)
    /// Threads waiting at the gate for another's invocation to leave (tests read it).
    private let waitingThreads = ManagedAtomic<Int>(0)
    var waitingCount: Int { waitingThreads.load(ordering: .relaxed) }

    /// The calling thread's identity, never 0.
    private static var currentThread: UInt {
        #if canImport(Darwin)
        UInt(bitPattern: pthread_self())
        #else
        UInt(pthread_self())
        #endif
    }

    var isClosed: Bool {
        condition.lock()
        defer { condition.unlock() }
        return closedFlag.load(ordering: .relaxed)
    }

    /// Enters the gate for an invocation; `false` if it is closed.
    private func enter() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let me = Self.currentThread
        while !closedFlag.load(ordering: .relaxed) {
            let active = activeThread.load(ordering: .relaxed)
            if active == 0 || active == me { break }
            waitingThreads.wrappingIncrement(ordering: .relaxed)
            condition.wait()
            waitingThreads.wrappingDecrement(ordering: .relaxed)
        }
        if closedFlag.load(ordering: .relaxed) { return false }
        activeThread.store(me, ordering: .relaxed)
        depth.wrappingIncrement(ordering: .relaxed)
        return true
    }

    /// Leaves the gate, waking a `close()` or an invocation waiting for this one to end.
    private func leave() {
        condition.lock()
        if depth.wrappingDecrementThenLoad(ordering: .relaxed) == 0 {
            activeThread.store(0, ordering: .relaxed)
            condition.broadcast()
        }
        condition.unlock()
    }

    /// Runs `body` unless the gate is closed. Invocations of one gate never overlap, whichever thread delivers.
    func run(_ body: () -> Void) {
        guard enter() else { return }
        body()
        leave()
    }

    /// Runs `body` for each of `batch`'s notifications in order, moved out of it, stopping as soon as the gate is
    /// closed; the gate is entered once for the whole batch (one read burst's notifications) instead of once per
    /// notification.
    ///
    /// `close()` sets the flag checked before each notification and then waits for the batch to leave, so once it
    /// returns no further invocation starts, exactly as with ``run(_:)``.
    func runEach(_ batch: NotificationBatch, _ body: (ReceivedNotification) -> Void) {
        guard enter() else { return }
        batch.consumeEach(while: { !closedFlag.load(ordering: .sequentiallyConsistent) }, body)
        leave()
    }

    /// Closes the gate. Returns once no invocation is running, except the caller's own.
    ///
    /// - Returns: `true` if this call closed the gate, `false` if it was already closed.
    @discardableResult
    func close() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let wasOpen = !closedFlag.load(ordering: .relaxed)
        closedFlag.store(true, ordering: .sequentiallyConsistent)
        let me = Self.currentThread
        while true {
            let active = activeThread.load(ordering: .relaxed)
            if active == 0 || active == me { break }
            condition.wait()
        }
        return wasOpen
    }
}
