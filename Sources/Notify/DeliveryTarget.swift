import Dispatch
import Foundation

/// Where an observation's handler runs.
///
/// Every target runs one observation's handler invocations one at a time, in the order the daemon
/// delivered the notifications. Observations never wait for each other: a slow handler delays only its own
/// observation (unless two observations share a serial queue or thread, which then runs their work in turn).
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
        case actor(any Actor)
    }

    let kind: Kind

    /// The context that calls `observe` (see the table above).
    public static let current = DeliveryTarget(kind: .current)

    /// Runs the handler on the library's I/O thread, as soon as the notification is read.
    ///
    /// For handlers that only hand work off (to a queue, a continuation, a lock-protected buffer): while such a
    /// handler runs, no other notification for this center is read.
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
    public static func thread(_ thread: NotificationThread) -> DeliveryTarget {
        DeliveryTarget(kind: .runLoop(thread.runLoopReference))
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

/// A run loop used from other threads.
///
/// `RunLoop` is not `Sendable` because most of its API belongs to its own thread; the one operation used
/// here, adding a timer, is thread-safe (CoreFoundation locks the run loop for it) and is also what wakes a
/// sleeping run loop: `RunLoop.perform` queues a block but does not wake it on Linux.
struct RunLoopReference: @unchecked Sendable {
    let runLoop: RunLoop

    init(_ runLoop: RunLoop) { self.runLoop = runLoop }

    func schedule(_ block: @escaping @Sendable () -> Void) {
        let timer = Timer(timeInterval: 0, repeats: false) { _ in block() }
        runLoop.add(timer, forMode: .common)
    }
}
