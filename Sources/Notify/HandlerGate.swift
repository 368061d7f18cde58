import Atomics
import Foundation

/// Guards one observation's handler so that once ``close()`` returns, no new invocation starts.
///
/// An invocation enters the gate before calling the handler and leaves it after. `close()` marks the gate
/// closed and then waits for an invocation already inside to leave, unless `close()` is called from that
/// invocation itself (cancelling from inside a handler), which must not wait for itself.
final class HandlerGate: Sendable {
    private struct State {
        var isClosed = false
        var activeThread: pthread_t?
    }

    // NSCondition is thread-safe; the state it protects is only touched while it is locked.
    private let condition = NSCondition()
    nonisolated(unsafe) private var state = State()
    /// `state.isClosed`, readable without the lock: a batch checks it before each of its invocations.
    private let closedFlag = ManagedAtomic(false)

    var isClosed: Bool {
        condition.lock()
        defer { condition.unlock() }
        return state.isClosed
    }

    /// Runs `body` unless the gate is closed. Invocations of one gate never overlap (the executor is serial).
    func run(_ body: () -> Void) {
        condition.lock()
        if state.isClosed {
            condition.unlock()
            return
        }
        state.activeThread = pthread_self()
        condition.unlock()

        body()

        condition.lock()
        state.activeThread = nil
        condition.broadcast()
        condition.unlock()
    }

    /// Closes the gate. Returns once no invocation is running, except the caller's own.
    ///
    /// - Returns: `true` if this call closed the gate, `false` if it was already closed.
    /// Runs `body` for each element in order, stopping as soon as the gate is closed; the gate is entered once
    /// for the whole batch (one read burst's notifications) instead of once per element.
    ///
    /// `close()` sets the flag checked before each element and then waits for the batch to leave, so once it
    /// returns no further invocation starts, exactly as with ``run(_:)``.
    func runEach<Element>(_ elements: [Element], _ body: (Element) -> Void) {
        condition.lock()
        if state.isClosed {
            condition.unlock()
            return
        }
        state.activeThread = pthread_self()
        condition.unlock()

        // By index from the buffer, so each element is lent to `body` rather than copied out of the array.
        elements.withUnsafeBufferPointer { elements in
            for index in elements.indices {
                if closedFlag.load(ordering: .sequentiallyConsistent) { break }
                body(elements[index])
            }
        }

        condition.lock()
        state.activeThread = nil
        condition.broadcast()
        condition.unlock()
    }

    @discardableResult
    func close() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let wasOpen = !state.isClosed
        state.isClosed = true
        closedFlag.store(true, ordering: .sequentiallyConsistent)
        let me = pthread_self()
        while let active = state.activeThread, pthread_equal(active, me) == 0 {
            condition.wait()
        }
        return wasOpen
    }
}
