import NIOCore
import NIOPosix

/// A value that arrives once (e.g. "the server is listening", "run() returned"), awaited with a timeout.
///
/// All state lives on one event loop of the shared NIO group, so no lock is needed.
package final class OneShot<Value: Sendable>: Sendable {
    private struct State {
        var result: Result<Value, any Error>?
        var waiters: [UInt64: (promise: EventLoopPromise<Value>, timeout: Scheduled<Void>)] = [:]
        var nextWaiterID: UInt64 = 0
    }

    private let eventLoop: any EventLoop
    private let state: NIOLoopBoundBox<State>

    package init() {
        eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        state = NIOLoopBoundBox.makeBoxSendingValue(State(), eventLoop: eventLoop)
    }

    /// Sets the outcome; later calls are ignored.
    package func fulfill(_ result: Result<Value, any Error>) {
        eventLoop.execute { [state] in
            guard state.value.result == nil else { return }
            state.value.result = result
            let waiters = state.value.waiters
            state.value.waiters = [:]
            for (_, waiter) in waiters {
                waiter.timeout.cancel()
                waiter.promise.completeWith(result)
            }
        }
    }

    /// Waits for the outcome; throws ``TestFailure`` naming `what` if it does not come within `timeout`.
    package func wait(timeout: TimeAmount = defaultTimeout, for what: String) async throws -> Value {
        let eventLoop = self.eventLoop
        return try await eventLoop.flatSubmit { [state] () -> EventLoopFuture<Value> in
            if let result = state.value.result { return eventLoop.makeCompletedFuture(result) }
            let id = state.value.nextWaiterID
            state.value.nextWaiterID += 1
            let promise = eventLoop.makePromise(of: Value.self)
            let timer = eventLoop.scheduleTask(in: timeout) {
                if let waiter = state.value.waiters.removeValue(forKey: id) {
                    waiter.promise.fail(TestFailure("timed out after \(timeout.secondsDescription) waiting for \(what)"))
                }
            }
            state.value.waiters[id] = (promise, timer)
            return promise.futureResult
        }.get()
    }
}
