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
    @discardableResult
    func close() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let wasOpen = !state.isClosed
        state.isClosed = true
        let me = pthread_self()
        while let active = state.activeThread, pthread_equal(active, me) == 0 {
            condition.wait()
        }
        return wasOpen
    }
}
