import Atomics
import NIOConcurrencyHelpers

/// What a center's handlers have not handled yet, and the read pause that bounds it.
///
/// Every notification and state change handed to a target (a queue, a thread, an actor) is charged here until its
/// handler has run. Above ``limit`` the center stops reading from the daemon, which then sees a slow subscriber and
/// applies each subscription's policy (coalesce, queue with a limit, disconnect) to what follows, as for a process
/// that reads slowly; below half of it the center reads again. Without this, a handler slower than the posters
/// made the process buffer everything (libdbus bounds its incoming queue the same way, `max_received_size`).
///
/// The pause is the center's, not one observation's: while it lasts, every observation of the center waits, and
/// the daemon holds what it has for each of them under its own policy.
final class DeliveryBacklog: Sendable {
    /// Bytes charged above which reading pauses; reading resumes at half of it.
    let limit: Int
    /// What one notification or state change costs beyond its payload: the notification itself, its job and its
    /// share of the batch's storage, about.
    static let entryCost = 128

    /// Bytes charged and not yet handled.
    private let charged = ManagedAtomic<Int>(0)
    /// Whether reading is paused: set by the I/O thread, cleared by the ``discharge(_:)`` that resumes it.
    private let isPaused = ManagedAtomic<Bool>(false)
    /// Who resumes reading: the current connection's channel handler (on its I/O thread).
    private let resumer = NIOLockedValueBox<(owner: ObjectIdentifier, resume: @Sendable () -> Void)?>(nil)

    /// Times reading paused, for tests and introspection.
    private let pauses = ManagedAtomic<Int>(0)

    init(limit: Int) {
        self.limit = limit
    }

    /// A backlog that never pauses (observations made outside a center, in tests).
    static let unbounded = DeliveryBacklog(limit: .max)

    /// Bytes charged now.
    var pendingBytes: Int { charged.load(ordering: .relaxed) }
    /// How many times reading has paused so far.
    var pauseCount: Int { pauses.load(ordering: .relaxed) }

    /// What `notifications` notifications with `payloadBytes` payload bytes in all are charged.
    static func cost(notifications: Int, payloadBytes: Int) -> Int { notifications &* entryCost &+ payloadBytes }

    /// Charges `cost` for work handed to a target.
    func charge(_ cost: Int) {
        charged.wrappingIncrement(by: cost, ordering: .sequentiallyConsistent)
    }

    /// Gives back `cost` once its handler ran (or its observation was cancelled); resumes reading when the pause is
    /// on and what is left fell to half the limit.
    func discharge(_ cost: Int) {
        let left = charged.wrappingDecrementThenLoad(by: cost, ordering: .sequentiallyConsistent)
        // Sequentially consistent with `pauseIfFull`: either this sees the pause, or the pause sees this decrement.
        guard left <= limit / 2, isPaused.load(ordering: .sequentiallyConsistent) else { return }
        guard isPaused.compareExchange(expected: true, desired: false, ordering: .sequentiallyConsistent).exchanged
        else { return }
        resumer.withLockedValue { $0?.resume }?()
    }

    /// Called by the channel handler before each read: whether to hold the read back. When it returns `true`,
    /// the handler's resumer (``setResumer(_:)``) is called once the backlog has drained to half the limit.
    func pauseIfFull() -> Bool {
        guard charged.load(ordering: .relaxed) > limit else { return false }
        isPaused.store(true, ordering: .sequentiallyConsistent)
        if charged.load(ordering: .sequentiallyConsistent) > limit / 2 {
            pauses.wrappingIncrement(ordering: .relaxed)
            return true
        }
        // Drained meanwhile; a discharge that saw the flag may call the resumer too, which then finds nothing held.
        isPaused.store(false, ordering: .sequentiallyConsistent)
        return false
    }

    /// Sets who resumes reading: the channel handler of each new connection, `owner`.
    func setResumer(owner: ObjectIdentifier, _ resume: @escaping @Sendable () -> Void) {
        resumer.withLockedValue { $0 = (owner, resume) }
    }

    /// Forgets `owner`'s resumer (its connection is gone), unless a newer connection's replaced it.
    func removeResumer(owner: ObjectIdentifier) {
        resumer.withLockedValue { if $0?.owner == owner { $0 = nil } }
    }
}
