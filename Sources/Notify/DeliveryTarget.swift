#if canImport(CoreFoundation)
import CoreFoundation
#endif
import Dispatch
import Foundation
import NIOConcurrencyHelpers

/// Where an observation's handler runs.
///
/// Every target runs one observation's handler invocations one at a time, in the order the daemon
/// delivered the notifications. Observations never wait for each other: a slow handler delays only its own
/// observation (unless two observations share a serial queue or thread, which then runs their work in turn),
/// until the center's handlers together lag by ``NotifyCenter/Configuration/pendingDeliveryLimit``; then the
/// center stops reading, and the daemon applies each subscription's ``DeliveryPolicy`` to what follows.
///
/// The default, ``current``, is the context that called `observe`:
///
/// | caller | handler runs |
/// |---|---|
/// | inside an actor (including the main actor) | isolated to that actor |
/// | on the main thread | on the main queue |
/// | inside an `OperationQueue` operation | as operations on that queue |
/// | anywhere else | on a private serial queue of the observation |
public struct DeliveryTarget: Sendable {
    enum Kind: Sendable {
        case current
        /// What ``current`` resolves to outside actors, the main thread and operation queues.
        case privateSerialQueue
        case immediate
        case queue(DispatchQueue)
        case operationQueue(OperationQueue)
        case runLoop(RunLoopReference)
        /// Held by the target, and so by the observation's executor: a thread created inline in the `observe`
        /// call has no other owner, and released it would stop before delivering anything.
        case thread(NotificationThread)
        case actor(any Actor)
    }

    let kind: Kind

    /// The context that calls `observe` (see the table above).
    public static let current = DeliveryTarget(kind: .current)

    /// Runs the handler on the library's I/O thread, as soon as the notification is read.
    ///
    /// For handlers that only hand work off (to a queue, a continuation, a lock-protected buffer): while such a
    /// handler runs, no other notification for this center is read. A post of a `self.` name runs it on the
    /// posting thread; when two threads deliver at once, the second waits for the first invocation to return
    /// (two such handlers that each post, from two threads, a `self.` name the other observes wait for each other).
    public static let immediate = DeliveryTarget(kind: .immediate)

    /// Runs the handler on `queue`. On a serial queue handlers run in daemon order; on a concurrent queue the
    /// library still runs this observation's handlers one at a time, in order.
    public static func queue(_ queue: DispatchQueue) -> DeliveryTarget {
        DeliveryTarget(kind: .queue(queue))
    }

    /// Runs the handler on the main dispatch queue (the main thread, when the main queue is being serviced).
    public static var mainQueue: DeliveryTarget { .queue(.main) }

    /// Runs the handler isolated to the main actor.
    public static var mainActor: DeliveryTarget { DeliveryTarget(kind: .actor(MainActor.shared)) }

    /// Runs the handler as operations on `queue` (`OperationQueue.current` is `queue` inside the handler).
    /// Even on a queue that runs several operations at once, this observation's handlers run one at a time.
    public static func operationQueue(_ queue: OperationQueue) -> DeliveryTarget {
        DeliveryTarget(kind: .operationQueue(queue))
    }

    /// Runs the handler on `runLoop`'s thread, in its common modes, waking the run loop if it sleeps.
    ///
    /// The run loop must be running (for a thread that only exists to receive notifications, use
    /// ``NotificationThread``).
    public static func runLoop(_ runLoop: RunLoop) -> DeliveryTarget {
        DeliveryTarget(kind: .runLoop(RunLoopReference(runLoop)))
    }

    /// Runs the handler on the thread of `thread`.
    ///
    /// The observation keeps `thread` running for as long as the observation lives, so
    /// `.thread(NotificationThread())` written inline gives the observation a thread of its own, which stops
    /// when the observation ends.
    public static func thread(_ thread: NotificationThread) -> DeliveryTarget {
        DeliveryTarget(kind: .thread(thread))
    }

    /// Runs the handler isolated to `actor`.
    public static func actor(_ actor: any Actor) -> DeliveryTarget {
        DeliveryTarget(kind: .actor(actor))
    }

    /// Replaces ``current`` with the concrete target it stands for in the calling context.
    func resolved(isolation: (any Actor)?) -> DeliveryTarget {
        guard case .current = kind else { return self }
        if let isolation { return .actor(isolation) }
        if Thread.isMainThread { return .mainQueue }
        if let operationQueue = OperationQueue.current, operationQueue !== OperationQueue.main {
            return .operationQueue(operationQueue)
        }
        return DeliveryTarget(kind: .privateSerialQueue)
    }

    /// Makes the executor one observation uses for all of its deliveries.
    func makeExecutor(label: String) -> any DeliveryExecutor {
        switch kind {
        case .current, .privateSerialQueue:
            // `current` is resolved before executors are made; unresolved, it means "anywhere else".
            return QueueExecutor(queue: DispatchQueue(label: label))
        case .immediate:
            return ImmediateExecutor()
        case .queue(let queue):
            // A private serial queue targeting the user's queue keeps this observation's order even when the
            // user's queue is concurrent, and still counts as "on" the user's queue for dispatchPrecondition.
            return QueueExecutor(queue: DispatchQueue(label: label, target: queue))
        case .operationQueue(let queue):
            return SerialJobQueue { step in queue.addOperation(step) }
        case .runLoop(let runLoop):
            return SerialJobQueue { step in runLoop.schedule(step) }
        case .thread(let thread):
            // Captures the thread: the executor (owned by the observation) is what keeps it alive.
            return SerialJobQueue { step in thread.schedule(step) }
        case .actor(let actor):
            return SerialJobQueue { step in
                Task { await runIsolated(to: actor, step) }
            }
        }
    }
}

/// Runs `body` on `actor`'s executor.
private func runIsolated(to actor: isolated any Actor, _ body: @Sendable () -> Void) {
    body()
}

/// Runs an observation's jobs in submission order.
protocol DeliveryExecutor: Sendable {
    func enqueue(_ job: @escaping @Sendable () -> Void)
    /// Whether `enqueue` runs the job before returning. Such an executor must not be handed batches: the
    /// point of `.immediate` is to run as each notification is read.
    var runsJobsInline: Bool { get }
}

extension DeliveryExecutor {
    var runsJobsInline: Bool { false }
}

struct ImmediateExecutor: DeliveryExecutor {
    func enqueue(_ job: @escaping @Sendable () -> Void) { job() }
    var runsJobsInline: Bool { true }
}

struct QueueExecutor: DeliveryExecutor {
    let queue: DispatchQueue
    func enqueue(_ job: @escaping @Sendable () -> Void) { queue.async(execute: job) }
}

extension SerialJobQueue: DeliveryExecutor {}

/// A run loop that other threads hand work to.
///
/// Work goes in as CoreFoundation blocks (`CFRunLoopPerformBlock`, run in the loop's common modes in the order
/// given), followed by `CFRunLoopWakeUp` to wake a sleeping loop: the run loop does not run blocks by itself
/// until something wakes it. Not timers: on Linux a `Timer` made with a block is never freed (swift-corelibs-
/// foundation retains it on its own behalf), so a timer per job leaked the timer and everything its block held.
///
/// `RunLoop` has no public way to its `CFRunLoop`, so the first block for a loop is queued with
/// `RunLoop.perform(inModes:block:)` and woken by one timer (leaked once); it records the loop's `CFRunLoop`,
/// and every later job goes through that. The run loop of a ``NotificationThread`` is known from the start.
final class RunLoopReference: Sendable {
    // Only `perform(inModes:block:)` and `add(_:forMode:)` are called on it from other threads, both of which
    // CoreFoundation does under the run loop's lock; the rest of `RunLoop` belongs to its own thread.
    private let runLoop: UncheckedSendableRunLoop
    private let handle: NIOLockedValueBox<RunLoopHandle?>

    init(_ runLoop: RunLoop) {
        self.runLoop = UncheckedSendableRunLoop(runLoop: runLoop)
        self.handle = NIOLockedValueBox(nil)
    }

    /// The run loop of the calling thread.
    static func current() -> RunLoopReference {
        let reference = RunLoopReference(RunLoop.current)
        reference.handle.withLockedValue { $0 = RunLoopHandle(CFRunLoopGetCurrent()) }
        return reference
    }

    /// Runs `block` on the run loop's thread, after the blocks scheduled before it, waking the loop if it sleeps.
    func schedule(_ block: @escaping @Sendable () -> Void) {
        if let handle = handle.withLockedValue({ $0 }) {
            handle.perform(block)
            return
        }
        let handle = self.handle
        runLoop.runLoop.perform(inModes: [.common]) {
            handle.withLockedValue { $0 = $0 ?? RunLoopHandle(CFRunLoopGetCurrent()) }
            block()
        }
        // Nothing but a timer can wake the loop before its CFRunLoop is known; this happens until the first
        // block has run (usually once), not per job.
        runLoop.runLoop.add(Timer(timeInterval: 0, repeats: false) { _ in }, forMode: .common)
    }

    /// Makes the run loop return from its current `run` after the blocks scheduled before (from any thread).
    func stop() {
        schedule { CFRunLoopStop(CFRunLoopGetCurrent()) }
    }
}

/// A `RunLoop` passed between threads for the thread-safe calls ``RunLoopReference`` makes.
private struct UncheckedSendableRunLoop: @unchecked Sendable {  // see RunLoopReference.runLoop
    let runLoop: RunLoop
}

/// A `CFRunLoop` used from other threads only through `CFRunLoopPerformBlock` and `CFRunLoopWakeUp`, which lock it.
private struct RunLoopHandle: @unchecked Sendable {  // CoreFoundation types are not marked Sendable
    let runLoop: CFRunLoop

    init(_ runLoop: CFRunLoop) { self.runLoop = runLoop }

    func perform(_ block: @escaping @Sendable () -> Void) {
        CFRunLoopPerformBlock(runLoop, kCFRunLoopCommonModes, block)
        CFRunLoopWakeUp(runLoop)
    }
}
