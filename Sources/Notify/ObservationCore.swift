import Atomics
import NIOConcurrencyHelpers

/// The library's side of one observation: its name, handler, executor and cancellation gate.
///
/// The center's registry holds it strongly; the user's ``Observation`` token holds it too and cancels it when
/// dropped.
final class ObservationCore: Sendable {
    let id: UInt64
    /// The observed name or pattern.
    let name: String
    /// The daemon subscription it belongs to.
    let key: SubscriptionKey
    private let executor: any DeliveryExecutor
    /// Charged for what waits on the executor (``DeliveryBacklog``).
    private let backlog: DeliveryBacklog
    /// This observation's part of the backlog, given back at once when it is cancelled (its jobs may then never
    /// run: a run loop or thread that stopped); ``settled`` from then on.
    private let outstanding = UnsafeAtomic<Int>.create(0)
    private static let settled = Int.min
    private let handler: @Sendable (ReceivedNotification) -> Void
    /// The handler of a state observation (``NotifyCenter/observeStates(_:sendingCurrent:on:isolation:handler:)``),
    /// which has no notification handler.
    private let stateHandler: (@Sendable (StateChange) -> Void)?
    /// A state observation that asked for the current values: a reconnection asks for them again.
    let sendsCurrentStates: Bool
    /// An observation that asked for the current (retained) value: each connection asks for it again.
    let receivesCurrentValue: Bool
    private let gate = HandlerGate()
    /// Set while the observation waits for its current (retained) value: live notifications the daemon sent
    /// before it registered the observation are skipped, so the current value comes first.
    /// Read for every notification on the I/O thread: an atomic flag rather than a lock, and an `UnsafeAtomic`
    /// (freed in `deinit`) because `ManagedAtomic`'s load was a call through its generic class per notification.
    private let waitingForCurrentValue = UnsafeAtomic<Bool>.create(false)
    /// Whether the executor runs jobs on the calling thread (`.immediate`), which makes staging pointless.
    let runsHandlerInline: Bool

    /// Where ``DeliveryStaging`` keeps this observation's notifications of a read burst: an index, so that
    /// staging costs an array access rather than a hash lookup. Unique among the center's live observations.
    let stagingSlot: Int

    init(
        id: UInt64, name: String, key: SubscriptionKey, stagingSlot: Int, executor: any DeliveryExecutor,
        backlog: DeliveryBacklog = .unbounded, receivesCurrentValue: Bool = false,
        handler: @escaping @Sendable (ReceivedNotification) -> Void
    ) {
        self.id = id
        self.name = name
        self.key = key
        self.stagingSlot = stagingSlot
        self.executor = executor
        self.backlog = backlog
        self.handler = handler
        self.stateHandler = nil
        self.sendsCurrentStates = false
        self.receivesCurrentValue = receivesCurrentValue
        self.runsHandlerInline = executor.runsJobsInline
    }

    /// A state observation: its handler takes ``StateChange``s; it never receives notifications.
    init(
        id: UInt64, name: String, key: SubscriptionKey, stagingSlot: Int, sendingCurrentStates: Bool,
        executor: any DeliveryExecutor, backlog: DeliveryBacklog = .unbounded,
        stateHandler: @escaping @Sendable (StateChange) -> Void
    ) {
        self.id = id
        self.name = name
        self.key = key
        self.stagingSlot = stagingSlot
        self.executor = executor
        self.backlog = backlog
        self.handler = { _ in }
        self.stateHandler = stateHandler
        self.sendsCurrentStates = sendingCurrentStates
        self.receivesCurrentValue = false
        self.runsHandlerInline = executor.runsJobsInline
    }

    deinit {
        waitingForCurrentValue.destroy()
        outstanding.destroy()
    }

    /// Charges `cost` to this observation and its center; `false` once the observation is cancelled.
    private func charge(_ cost: Int) -> Bool {
        var current = outstanding.load(ordering: .relaxed)
        while current != Self.settled {
            let (exchanged, original) = outstanding.weakCompareExchange(
                expected: current, desired: current &+ cost, ordering: .relaxed)
            if exchanged {
                backlog.charge(cost)
                return true
            }
            current = original
        }
        return false
    }

    /// Gives `cost` back, unless cancelling gave back everything already.
    private func discharge(_ cost: Int) {
        var current = outstanding.load(ordering: .relaxed)
        while current != Self.settled {
            let (exchanged, original) = outstanding.weakCompareExchange(
                expected: current, desired: current &- cost, ordering: .relaxed)
            if exchanged {
                backlog.discharge(cost)
                return
            }
            current = original
        }
    }

    var isWaitingForCurrentValue: Bool { waitingForCurrentValue.load(ordering: .acquiring) }
    func beginWaitingForCurrentValue() { waitingForCurrentValue.store(true, ordering: .releasing) }
    func finishWaitingForCurrentValue() { waitingForCurrentValue.store(false, ordering: .releasing) }

    var isCancelled: Bool { gate.isClosed }
    /// Threads waiting to run this observation's handler while another runs it (tests read it).
    var threadsWaitingForHandler: Int { gate.waitingCount }

    /// Hands a notification to the executor; the handler runs there unless the observation is cancelled first.
    func deliver(_ notification: ReceivedNotification) {
        if runsHandlerInline {
            // Same as enqueueing on the inline executor, without allocating a job per notification.
            gate.run { handler(notification) }
            return
        }
        let cost = DeliveryBacklog.cost(notifications: 1, payloadBytes: notification.payloadCount)
        guard charge(cost) else { return }
        executor.enqueue { [self] in
            gate.run { handler(notification) }
            discharge(cost)
        }
    }

    /// Hands a state value to the executor (state observations only).
    func deliver(_ change: StateChange) {
        guard let stateHandler else { return }
        let cost = DeliveryBacklog.cost(notifications: 1, payloadBytes: 0)
        guard charge(cost) else { return }
        executor.enqueue { [self] in
            gate.run { stateHandler(change) }
            discharge(cost)
        }
    }

    /// Hands one read burst's notifications to the executor as one job.
    ///
    /// The gate is consulted before each notification, not once per batch: a `cancel()` that returns while the
    /// batch runs still stops every handler invocation after it, and a handler that cancels its own
    /// observation receives nothing more from the batch.
    func deliver(batch: NotificationBatch) {
        let cost = DeliveryBacklog.cost(notifications: batch.count, payloadBytes: batch.payloadBytes)
        guard charge(cost) else { return }
        executor.enqueue { [self] in
            gate.runEach(batch, handler)
            discharge(cost)
        }
    }

    /// Stops future invocations; returns once none can start (see ``HandlerGate``).
    ///
    /// - Returns: `true` the first time.
    func cancel() -> Bool {
        guard gate.close() else { return false }
        let left = outstanding.exchange(Self.settled, ordering: .relaxed)
        if left != Self.settled, left != 0 { backlog.discharge(left) }
        return true
    }
}

/// A token for one observation. The observation stays active while the token is alive; dropping the last
/// reference to the token cancels it, as does ``cancel()``.
///
/// Keep the token (for example in a property) for as long as you want notifications.
public final class Observation: Sendable, Hashable, CustomStringConvertible {
    let core: ObservationCore
    // Strong on purpose: a live observation keeps its center (and so its connection) alive.
    private let center: NotifyCenter

    init(core: ObservationCore, center: NotifyCenter) {
        self.core = core
        self.center = center
    }

    deinit {
        cancel()
    }

    /// The observed name.
    public var name: String { core.name }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { core.isCancelled }

    /// Stops the observation.
    ///
    /// Idempotent and safe to call from inside the observation's own handler. Once it returns, no new handler
    /// invocation starts; if a handler invocation is running on another thread, `cancel()` waits for it to
    /// finish. When this was the last observation of its name in the process, the library unsubscribes from
    /// the daemon.
    public func cancel() {
        if core.cancel() {
            center.core.remove(core)
        }
    }

    /// Whether both are the same token (observations compare by identity).
    public static func == (lhs: Observation, rhs: Observation) -> Bool { lhs === rhs }
    /// Hashes the token's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    /// The observed name, the observation's number in its center, and whether it was cancelled.
    public var description: String { "Observation(\(core.name), #\(core.id)\(isCancelled ? ", cancelled" : ""))" }
}
