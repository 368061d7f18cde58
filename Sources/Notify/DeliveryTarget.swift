import Dispatch

/// Where an observation's handler runs.
///
/// Every target runs one observation's handler invocations one at a time, in the order the daemon
/// delivered the notifications. Observations never wait for each other: a slow handler delays only its own
/// observation (unless two observations share a serial queue, which then runs their work in turn).
public struct DeliveryTarget: Sendable {
    enum Kind: Sendable {
        case immediate
        case queue(DispatchQueue)
    }

    let kind: Kind

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

    /// Runs the handler on the main dispatch queue.
    public static var mainQueue: DeliveryTarget { .queue(.main) }

    /// Makes the executor one observation uses for all of its deliveries.
    func makeExecutor(label: String) -> any DeliveryExecutor {
        switch kind {
        case .immediate:
            return ImmediateExecutor()
        case .queue(let queue):
            // A private serial queue targeting the user's queue keeps this observation's order even when the
            // user's queue is concurrent, and still counts as "on" the user's queue for dispatchPrecondition.
            return QueueExecutor(queue: DispatchQueue(label: label, target: queue))
        }
    }
}

/// Runs an observation's jobs in submission order.
protocol DeliveryExecutor: Sendable {
    func execute(_ job: @escaping @Sendable () -> Void)
}

struct ImmediateExecutor: DeliveryExecutor {
    func execute(_ job: @escaping @Sendable () -> Void) { job() }
}

struct QueueExecutor: DeliveryExecutor {
    let queue: DispatchQueue
    func execute(_ job: @escaping @Sendable () -> Void) { queue.async(execute: job) }
}
