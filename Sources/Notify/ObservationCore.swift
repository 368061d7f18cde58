import NIOConcurrencyHelpers

/// The library's side of one observation: its name, handler, executor and cancellation gate.
///
/// The center's registry holds it strongly; the user's ``Observation`` token holds it too and cancels it when
/// dropped.
final class ObservationCore: Sendable {
    let id: UInt64
    let name: String
    private let executor: any DeliveryExecutor
    private let handler: @Sendable (ReceivedNotification) -> Void
    private let gate = HandlerGate()

    init(
        id: UInt64, name: String, executor: any DeliveryExecutor,
        handler: @escaping @Sendable (ReceivedNotification) -> Void
    ) {
        self.id = id
        self.name = name
        self.executor = executor
        self.handler = handler
    }

    var isCancelled: Bool { gate.isClosed }

    /// Hands a notification to the executor; the handler runs there unless the observation is cancelled first.
    func deliver(_ notification: ReceivedNotification) {
        executor.enqueue { [self] in
            gate.run { handler(notification) }
        }
    }

    /// Stops future invocations; returns once none can start (see ``HandlerGate``).
    ///
    /// - Returns: `true` the first time.
    func cancel() -> Bool {
        gate.close()
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

    public static func == (lhs: Observation, rhs: Observation) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String { "Observation(\(core.name), #\(core.id)\(isCancelled ? ", cancelled" : ""))" }
}
