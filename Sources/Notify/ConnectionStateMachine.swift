import NotifyWire

/// The life of a center's connection as a value: the phase, the reconnect backoff, what a new connection must
/// replay, and the callers waiting for a connection.
///
/// It does no I/O: each method takes one event and returns what the caller (``CenterCore``) must do, so every
/// transition can be tested without a socket. `Connection` is the channel in production; `Waiter` is what a
/// caller of `waitUntilConnected` waits on (a continuation).
struct ConnectionStateMachine<Connection: Identifiable, Waiter> {
    enum Phase {
        case idle
        case connecting
        case handshaking(Connection)
        case connected(Connection, ServerFrame.Welcome)
        case waitingToReconnect
        case closed
    }

    fileprivate struct ConnectWaiter {
        var waiter: Waiter
        /// Fail at the first failed connection attempt instead of waiting for a later one.
        var failFast: Bool
    }

    let policy: NotifyCenter.ReconnectPolicy
    private(set) var phase = Phase.idle {
        didSet {
            switch phase {
            case .connected(_, let welcome): postingLimits = welcome.limits
            case .handshaking: postingLimits = .default
            case .idle, .connecting, .waitingToReconnect, .closed: postingLimits = nil
            }
        }
    }
    /// The limits a post is checked against while there is a connection to post on (`nil` without one): kept
    /// beside ``phase`` so that a post reads two integers instead of copying the connection out of the phase.
    private(set) var postingLimits: ServerLimits?
    /// The delay before the next attempt of the backoff.
    private(set) var reconnectDelay: Double
    /// The reason the last connection attempt failed or the last connection ended.
    private(set) var lastFailure: String?
    /// A fatal `ERROR` the daemon sent on the current connection, reported when it closes.
    private var closingError: ErrorFrame?
    /// The `GOODBYE` the daemon sent on the current connection: it is shutting down gracefully.
    private var goodbye: GoodbyeFrame?
    private var lastInstanceID: InstanceID?
    /// The socket appeared while an attempt was under way: should that attempt fail, the next one starts at
    /// once (the attempt may have raced the daemon's `listen`/`rename`).
    private var socketAppearedDuringAttempt = false
    private var waiters: [UInt64: ConnectWaiter] = [:]
    /// Nesting depth of `suspend()`, replayed on every new connection.
    private(set) var suspendDepth = 0

    init(policy: NotifyCenter.ReconnectPolicy) {
        self.policy = policy
        self.reconnectDelay = policy.initialDelay
    }

    /// The connection frames can be written to: from the start of the handshake until it closes.
    var connection: Connection? {
        switch phase {
        case .handshaking(let connection), .connected(let connection, _): connection
        case .idle, .connecting, .waitingToReconnect, .closed: nil
        }
    }

    var isClosed: Bool {
        if case .closed = phase { return true }
        return false
    }

    // MARK: Attempts

    /// Whether to open a connection now (the first one, or the next after a backoff or a socket appearing).
    mutating func startConnecting() -> Bool {
        switch phase {
        case .idle, .waitingToReconnect:
            phase = .connecting
            socketAppearedDuringAttempt = false
            return true
        case .connecting, .handshaking, .connected, .closed:
            return false
        }
    }

    enum EstablishedAction {
        /// Send `HELLO`, then replay every daemon subscription and `suspendDepth` `SUSPEND`s.
        case handshake(suspendDepth: Int)
        /// The center closed meanwhile: close the connection.
        case close
    }

    /// A connection was opened (and its daemon trusted).
    mutating func connectionEstablished(_ connection: Connection) -> EstablishedAction {
        guard case .connecting = phase else { return .close }
        phase = .handshaking(connection)
        closingError = nil
        goodbye = nil
        return .handshake(suspendDepth: suspendDepth)
    }

    /// What to do after an attempt failed or a connection ended.
    struct Disconnected {
        /// Waiters to fail now.
        var failing: [Waiter]
        /// Why, for logs, events and errors.
        var reason: String
        /// When to try again, or `nil` when the policy does not reconnect.
        var reconnectAfter: Double?
    }

    /// The attempt to connect failed; `nil` when no attempt was under way (the center closed meanwhile).
    mutating func connectFailed(reason: String) -> Disconnected? {
        guard case .connecting = phase else { return nil }
        lastFailure = reason
        phase = .waitingToReconnect
        let reconnects = policy.isEnabled
        let failing = takeWaiters { $0.failFast || !reconnects }
        return Disconnected(failing: failing, reason: reason, reconnectAfter: retryDelay())
    }

    /// `connection` closed (`reason` is the channel's own account, if any); `nil` if it was not the current one.
    mutating func connectionClosed(_ connection: Connection, reason: String?) -> Disconnected? {
        guard let current = self.connection, current.id == connection.id else { return nil }
        var failing: [Waiter] = []
        if case .handshaking = phase {
            // Closed before WELCOME: the daemon refused this connection (a quota, say). Callers that asked to
            // fail fast learn why now instead of waiting out their timeout.
            failing = takeWaiters { $0.failFast }
        }
        let why =
            goodbye.map(describe) ?? closingError.map { "daemon closed the connection: \($0)" } ?? reason
            ?? "connection closed by the daemon"
        phase = .waitingToReconnect
        lastFailure = why
        return Disconnected(failing: failing, reason: why, reconnectAfter: retryDelay())
    }

    /// What a `WELCOME` completes.
    struct Welcomed {
        var daemonRestarted: Bool
        /// Every waiter, to resume.
        var waiters: [Waiter]
    }

    /// The daemon's `WELCOME` on `connection`; `nil` if it is not the connection being handshaken.
    mutating func welcome(_ welcome: ServerFrame.Welcome, on connection: Connection) -> Welcomed? {
        guard case .handshaking(let current) = phase, current.id == connection.id else { return nil }
        phase = .connected(connection, welcome)
        socketAppearedDuringAttempt = false
        let restarted = lastInstanceID.map { $0 != welcome.instanceID } ?? false
        lastInstanceID = welcome.instanceID
        reconnectDelay = policy.initialDelay
        lastFailure = nil
        return Welcomed(daemonRestarted: restarted, waiters: takeWaiters { _ in true })
    }

    /// The daemon announced it is shutting down: the disconnect that follows waits as long as it asked.
    mutating func receivedGoodbye(_ frame: GoodbyeFrame) { goodbye = frame }

    /// The daemon sent an `ERROR` that closes the connection: the disconnect reports it.
    mutating func receivedClosingError(_ frame: ErrorFrame) { closingError = frame }

    enum SocketAppearedAction {
        /// Cancel the backoff's timer and connect now.
        case connectNow
        case none
    }

    /// The daemon's socket appeared at its path.
    mutating func socketAppeared() -> SocketAppearedAction {
        switch phase {
        case .waitingToReconnect:
            return .connectNow
        case .connecting, .handshaking:
            socketAppearedDuringAttempt = true
            return .none
        case .idle, .connected, .closed:
            return .none
        }
    }

    /// What the center must release when it closes.
    struct Closed {
        var connection: Connection?
        var waiters: [Waiter]
    }

    /// The center is closing; `nil` if it already was.
    mutating func close() -> Closed? {
        if isClosed { return nil }
        let connection = self.connection
        phase = .closed
        return Closed(connection: connection, waiters: takeWaiters { _ in true })
    }

    // MARK: Waiters

    enum WaitAction {
        case connected
        case closed
        /// Failed fast while between attempts; the last attempt's reason.
        case failed(reason: String)
        /// Registered: resumed by ``welcome(_:on:)``, failed by a failed attempt, or removed on timeout.
        case waiting
    }

    /// A caller wants to wait until connected.
    mutating func addWaiter(_ waiter: Waiter, id: UInt64, failFast: Bool) -> WaitAction {
        switch phase {
        case .connected: return .connected
        case .closed: return .closed
        case .waitingToReconnect where failFast: return .failed(reason: lastFailure ?? "not connected")
        case .idle, .connecting, .handshaking, .waitingToReconnect:
            waiters[id] = ConnectWaiter(waiter: waiter, failFast: failFast)
            return .waiting
        }
    }

    /// Removes a waiter whose time ran out; `nil` if it was resumed already.
    mutating func removeWaiter(id: UInt64) -> Waiter? {
        waiters.removeValue(forKey: id)?.waiter
    }

    private mutating func takeWaiters(where condition: (ConnectWaiter) -> Bool) -> [Waiter] {
        let taken = waiters.filter { condition($0.value) }
        for id in taken.keys { waiters.removeValue(forKey: id) }
        return taken.values.map(\.waiter)
    }

    // MARK: Suspension

    /// A `SUSPEND` was sent: later connections replay it.
    mutating func suspended() { suspendDepth += 1 }

    /// A `RESUME` was sent.
    mutating func resumed() { suspendDepth -= 1 }

    /// A `SUSPEND` failed (refused, or lost with its connection): later connections do not replay it.
    mutating func suspensionFailed() { suspendDepth = max(0, suspendDepth - 1) }

    // MARK: Backoff

    /// The delay before the next attempt: none when the socket appeared during the failed one, else the backoff;
    /// `nil` when the policy does not reconnect.
    private mutating func retryDelay() -> Double? {
        guard policy.isEnabled else { return nil }
        if socketAppearedDuringAttempt {
            socketAppearedDuringAttempt = false
            return 0
        }
        if let goodbye {
            // A calm disconnect: the first attempt waits as long as the daemon asked (within the policy's
            // maximum); later ones back off from there rather than from the initial delay.
            self.goodbye = nil
            let delay = goodbyeDelay(goodbye)
            reconnectDelay = min(max(reconnectDelay, delay) * 2, policy.maximumDelay)
            return delay
        }
        let delay = reconnectDelay
        reconnectDelay = min(delay * 2, policy.maximumDelay)
        return delay
    }

    private func goodbyeDelay(_ goodbye: GoodbyeFrame) -> Double {
        min(Double(goodbye.reconnectAfterMilliseconds) / 1_000, policy.maximumDelay)
    }

    /// The disconnect reason after `GOODBYE`; it keeps the `shutting-down` error code's name, which clients of the
    /// fatal `ERROR shutting-down` used before `GOODBYE` existed may look for.
    private func describe(_ goodbye: GoodbyeFrame) -> String {
        let next =
            policy.isEnabled ? "reconnecting in \(Int((goodbyeDelay(goodbye) * 1_000).rounded())) ms" : "not reconnecting"
        return "daemon closed the connection: \(ErrorCode.shuttingDown): the daemon is shutting down (\(goodbye.reason)); \(next)"
    }
}

extension ConnectionStateMachine: Sendable where Connection: Sendable, Waiter: Sendable {}
extension ConnectionStateMachine.Phase: Sendable where Connection: Sendable, Waiter: Sendable {}
extension ConnectionStateMachine.ConnectWaiter: Sendable where Connection: Sendable, Waiter: Sendable {}

// Actions compare equal when they ask for the same thing (the tests compare them).
extension ConnectionStateMachine.EstablishedAction: Equatable {}
extension ConnectionStateMachine.WaitAction: Equatable {}
extension ConnectionStateMachine.Disconnected: Equatable where Waiter: Equatable {}
extension ConnectionStateMachine.Welcomed: Equatable where Waiter: Equatable {}
