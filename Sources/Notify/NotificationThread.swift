import Foundation
import NIOConcurrencyHelpers

/// A dedicated thread running its run loop, for observations that want "a notification thread".
///
/// ```swift
/// let thread = NotificationThread(name: "config-watcher")
/// let observation = try center.observe("com.example.config", on: .thread(thread)) { note in
///     // runs on `thread`, one notification at a time, in daemon order
/// }
/// ```
///
/// The thread runs until ``stop()`` is called or the object is released. An observation that delivers on it
/// (``DeliveryTarget/thread(_:)``) holds it, so it runs at least as long as the observation.
public final class NotificationThread: Sendable {
    let runLoopReference: RunLoopReference
    private let thread: ThreadReference
    private let stopped: NIOLockedValueBox<Bool>
    /// Signalled once the thread has left its run loop (for tests: ``waitUntilFinished(timeout:)``).
    let finished: DispatchSemaphore

    /// Starts the thread and returns once its run loop is ready.
    public init(name: String = "notify.notification-thread") {
        let stopped = NIOLockedValueBox(false)
        let finished = DispatchSemaphore(value: 0)
        let ready = DispatchSemaphore(value: 0)
        let handoff = NIOLockedValueBox<(RunLoopReference, ThreadReference)?>(nil)
        let thread = Thread {
            // On Linux a name given before start() is lost; name the thread from inside.
            Thread.current.name = name
            let runLoop = RunLoop.current
            // A run loop without an input source returns at once: keep one far-future timer in it.
            runLoop.add(Timer(fire: .distantFuture, interval: 0, repeats: false) { _ in }, forMode: .default)
            handoff.withLockedValue { $0 = (RunLoopReference.current(), ThreadReference(Thread.current)) }
            ready.signal()
            while !stopped.withLockedValue({ $0 }) {
                _ = runLoop.run(mode: .default, before: .distantFuture)
            }
            finished.signal()
        }
        thread.start()
        ready.wait()
        let (runLoop, reference) = handoff.withLockedValue { $0! }
        self.runLoopReference = runLoop
        self.thread = reference
        self.stopped = stopped
        self.finished = finished
    }

    deinit {
        stop()
    }

    /// Waits until the thread has finished (after ``stop()``); `false` if it has not within `timeout` seconds.
    func waitUntilFinished(timeout: Double) -> Bool {
        guard finished.wait(timeout: .now() + timeout) == .success else { return false }
        finished.signal()  // for the next caller
        return true
    }

    /// Runs `block` on this thread, after the blocks scheduled before it.
    func schedule(_ block: @escaping @Sendable () -> Void) {
        runLoopReference.schedule(block)
    }

    /// Whether the caller is running on this thread.
    public var isCurrent: Bool { Thread.current === thread.thread }

    /// Lets the thread finish: its run loop returns after the work already scheduled on it.
    public func stop() {
        let wasRunning = stopped.withLockedValue { stopped -> Bool in
            defer { stopped = true }
            return !stopped
        }
        // Running a job does not make `RunLoop.run(mode:before:)` return, so the loop would never see
        // `stopped` by itself: the last job stops the run loop.
        if wasRunning { runLoopReference.stop() }
    }
}

/// A `Thread` compared by identity from other threads (only its identity is used).
struct ThreadReference: @unchecked Sendable {
    let thread: Thread
    init(_ thread: Thread) { self.thread = thread }
}
