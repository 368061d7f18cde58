#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import Atomics
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NotifyWire

/// The engine behind a ``NotifyCenter``: one daemon connection on its own I/O thread, the name → observations
/// registry, outstanding requests, and reconnection.
///
/// Public methods may be called from any thread; state is behind one lock, which is never held while user
/// code runs or a continuation resumes.
final class CenterCore: Sendable {
    let configuration: NotifyCenter.Configuration
    let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    let eventLoop: EventLoop
    private let state: AdaptiveLockedValue<State>
    private let allocator = ByteBufferAllocator()
    /// Bumped (under the state lock) whenever observations are added or removed, so that the I/O thread can
    /// tell without the lock whether the observers it looked up for a ``NotificationRun`` are still current.
    private let routingGeneration = ManagedAtomic<UInt64>(0)
    private let localSender = SenderCredentials(pid: UInt32(getpid()), uid: getuid(), gid: getgid())

    init(configuration: NotifyCenter.Configuration) {
        self.configuration = configuration
        var logger = configuration.logger
        logger[metadataKey: "socket"] = "\(configuration.socketPath)"
        self.logger = logger
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.eventLoop = group.next()
        self.state = AdaptiveLockedValue(State(reconnectDelay: configuration.reconnect.initialDelay))
    }

    // MARK: State

    struct State {
        enum Phase {
            case idle
            case connecting
            case handshaking(Channel)
            case connected(Channel, ServerFrame.Welcome)
            case waitingToReconnect
            case closed
        }

        /// One daemon subscription: a pattern (or name) under one policy, shared by its observations.
        struct SubscriptionEntry {
            var id: UInt32
            var pattern: NotificationPattern
            var observations: [ObservationCore]
        }

        enum PendingRequest {
            case subscribe(pattern: String)
            /// A subscription asking for the current (retained) value for one observation; `probe` is an extra
            /// subscription made only for that purpose, removed once answered.
            case currentValue(ObservationCore, probe: UInt32?)
            case unsubscribe(pattern: String)
            case ping(CheckedContinuation<Void, Error>)
            case post(name: String, CheckedContinuation<PostReceipt, Error>)
            case acknowledged(CheckedContinuation<Void, Error>)
            /// A request the library makes on its own (replaying `suspend` after a reconnection, removing a
            /// current-value probe); `operation` names it in logs and events if the daemon rejects it.
            case housekeeping(operation: String)
            case state(CheckedContinuation<UInt64?, Error>)
            case query(CheckedContinuation<ByteBuffer, Error>)
        }

        struct ConnectWaiter {
            var continuation: CheckedContinuation<Void, Error>
            /// Fail at the first failed connection attempt instead of waiting for a later one.
            var failFast: Bool
        }

        var phase = Phase.idle {
            didSet {
                switch phase {
                case .connected(_, let welcome): postingLimits = welcome.limits
                case .handshaking: postingLimits = .default
                case .idle, .connecting, .waitingToReconnect, .closed: postingLimits = nil
                }
            }
        }
        /// The limits a post is checked against while there is a channel to post on (`nil` without one): kept
        /// with ``phase`` so that each post reads two integers instead of taking the channel and the `WELCOME`
        /// out of the phase (a retain and release of each).
        private(set) var postingLimits: ServerLimits?
        var outgoing = ByteBuffer()
        /// Posts made while disconnected under `DisconnectedPosting.wait`, oldest first.
        var held: [(deadline: NIODeadline, name: String, payload: ByteBuffer)] = []
        var heldExpiryScheduled = false
        var flushScheduled = false
        /// The name of the last successful `post`, which passed the grammar (compared byte for byte).
        var lastPostedName: ExactName?
        var nextRequestID: UInt32 = 1
        var nextUnacknowledgedPostID: UInt32 = 0
        var nextSubscriptionID: UInt32 = 1
        var nextObservationID: UInt64 = 1
        var nextWaiterID: UInt64 = 1
        var pending: [UInt32: State.PendingRequest] = [:]
        /// The parts received so far of long query answers, by request id (`QUERY_RESULT_PART`).
        var queryParts: [UInt32: [ByteBuffer]] = [:]
        var subscriptions: [SubscriptionKey: SubscriptionEntry] = [:]
        /// Observations of exact names (all policies), for routing without scanning.
        var exactObservers: [ExactName: [ObservationCore]] = [:]
        /// Subscriptions with wildcards, matched against every incoming name.
        var patternKeys: Set<SubscriptionKey> = []
        var keysByID: [UInt32: SubscriptionKey] = [:]
        /// `OVERFLOW` counts waiting to be attached to the next notification of their subscription.
        var pendingDrops: [SubscriptionKey: UInt64] = [:]
        /// Nesting depth of `suspend()`, replayed after a reconnection.
        var suspendCount = 0
        /// Subscriptions the daemon refused since the last barrier; the next `synchronize()` reports them.
        var rejectedSubscriptions: [(pattern: String, error: ErrorFrame)] = []
        var connectWaiters: [UInt64: State.ConnectWaiter] = [:]
        var eventContinuations: [UInt64: AsyncStream<ConnectionEvent>.Continuation] = [:]
        var lastInstanceID: InstanceID?
        var reconnectDelay: Double
        /// The reason the last connection attempt failed or the last connection ended.
        var lastFailure: String?
        /// A fatal `ERROR` the daemon sent on the current connection, reported when it closes.
        var closingError: ErrorFrame?
        /// The `GOODBYE` the daemon sent on the current connection: it is shutting down gracefully.
        var goodbye: GoodbyeFrame?
        /// Watches the socket path while there is no connection, to reconnect as soon as a daemon is back
        /// rather than when the backoff runs out; `nil` while connected (see ``SocketPathWatcher``).
        var socketWatcher: SocketPathWatcher?
        /// The next backoff attempt, cancelled when the socket appearing starts one sooner.
        var reconnectTask: Scheduled<Void>?
        /// The socket appeared while an attempt was under way: should that attempt fail, the next one starts at
        /// once (the attempt may have raced the daemon's `listen`/`rename`).
        var socketAppearedDuringAttempt = false

        init(reconnectDelay: Double) { self.reconnectDelay = reconnectDelay }

        var channel: Channel? {
            switch phase {
            case .handshaking(let channel), .connected(let channel, _): channel
            case .idle, .connecting, .waitingToReconnect, .closed: nil
            }
        }

        var limits: ServerLimits { postingLimits ?? .default }

        /// Marks a flush as scheduled after appending to ``outgoing``; returns `true` when the caller must
        /// schedule it (none was pending).
        mutating func claimFlush() -> Bool {
            if flushScheduled { return false }
            flushScheduled = true
            return true
        }

        mutating func makeRequestID() -> UInt32 {
            // Acknowledged requests use ids below 2^31; unacknowledged posts use the upper half, so an ERROR
            // for one of them can be told apart without remembering every post.
            let id = nextRequestID
            nextRequestID = nextRequestID >= 0x7FFF_FFFF ? 1 : nextRequestID + 1
            return id
        }

        /// Subscription ids start at 1 and skip 0 when they wrap: `OVERFLOW` uses 0 for the whole connection.
        mutating func makeSubscriptionID() -> UInt32 {
            let id = nextSubscriptionID
            nextSubscriptionID = nextSubscriptionID == UInt32.max ? 1 : nextSubscriptionID + 1
            return id
        }

        mutating func makeUnacknowledgedPostID() -> UInt32 {
            nextUnacknowledgedPostID = (nextUnacknowledgedPostID &+ 1) & 0x7FFF_FFFF
            return 0x8000_0000 | nextUnacknowledgedPostID
        }
    }

    // MARK: Lifecycle

    func start() {
        eventLoop.execute { self.startConnecting() }
    }

    func close() async {
        let (channel, waiters, pending, streams, watcher) = state.withLockedValue { state in
            if case .closed = state.phase { return (nil as Channel?, [State.ConnectWaiter](), [State.PendingRequest](), [AsyncStream<ConnectionEvent>.Continuation](), nil as SocketPathWatcher?) }
            let channel = state.channel
            let watcher = state.socketWatcher
            state.socketWatcher = nil
            state.phase = .closed
            let result = (
                channel, Array(state.connectWaiters.values), Array(state.pending.values),
                Array(state.eventContinuations.values), watcher
            )
            state.connectWaiters.removeAll()
            state.pending.removeAll()
            state.queryParts.removeAll()
            state.eventContinuations.removeAll()
            return result
        }
        for waiter in waiters { waiter.continuation.resume(throwing: NotifyError.closed) }
        Self.fail(pending, with: NotifyError.closed)
        for stream in streams { stream.finish() }
        if let channel { try? await channel.close() }
        if let watcher { try? await eventLoop.submit { watcher.stop() }.get() }
        try? await group.shutdownGracefully()
    }

    /// Closes without waiting (from `deinit`).
    func closeInBackground() {
        let core = self
        Task { await core.close() }
    }

    // MARK: Connecting

    private func startConnecting() {
        let proceed = state.withLockedValue { state -> Bool in
            switch state.phase {
            case .idle, .waitingToReconnect:
                state.phase = .connecting
                state.reconnectTask = nil
                state.socketAppearedDuringAttempt = false
                return true
            case .connecting, .handshaking, .connected, .closed:
                return false
            }
        }
        guard proceed else { return }
        let path = configuration.socketPath
        ClientBootstrap(group: eventLoop)
            .channelOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 1024, initial: 16_384, maximum: 1 << 20)
            )
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(DaemonChannelHandler(core: self))
                }
            }
            .connect(unixDomainSocketPath: path)
            .whenComplete { result in
                switch result {
                case .success(let channel): self.channelConnected(channel)
                case .failure(let error): self.connectFailed(Self.describe(error))
                }
            }
    }

    private func channelConnected(_ channel: Channel) {
        if let refusal = untrustedDaemon(at: channel) {
            channel.close(promise: nil)
            connectFailed(refusal.description, error: refusal)
            return
        }
        let accepted = state.withLockedValue { state -> Bool in
            guard case .connecting = state.phase else { return false }
            state.phase = .handshaking(channel)
            state.closingError = nil
            state.goodbye = nil
            // HELLO first, then every live subscription, pipelined without waiting for WELCOME.
            var buffer = channel.allocator.buffer(capacity: 256)
            ClientFrame.hello(.init(clientName: configuration.clientName)).encode(into: &buffer)
            for (key, entry) in state.subscriptions where !NotificationName.isProcessLocal(key.pattern) {
                let requestID = state.makeRequestID()
                state.pending[requestID] = .subscribe(pattern: key.pattern)
                ClientFrame.subscribe(
                    .init(requestID: requestID, subscriptionID: entry.id, policy: key.policy, pattern: key.pattern)
                ).encode(into: &buffer)
            }
            for _ in 0..<state.suspendCount {
                let requestID = state.makeRequestID()
                state.pending[requestID] = .housekeeping(operation: "suspend (replayed after reconnecting)")
                ClientFrame.suspend(requestID: requestID).encode(into: &buffer)
            }
            for post in state.held {
                ClientFrame.post(.init(requestID: state.makeUnacknowledgedPostID(), name: post.name, payload: post.payload))
                    .encode(into: &buffer)
            }
            state.held.removeAll()
            state.outgoing = buffer
            state.flushScheduled = true
            return true
        }
        if accepted {
            flushOutgoing()
        } else {
            channel.close(promise: nil)
        }
    }

    /// The refusal of the daemon at the other end of `channel`, or `nil` when its user may serve this process.
    private func untrustedDaemon(at channel: Channel) -> NotifyError? {
        let path = configuration.socketPath
        guard let daemon = PeerCredentials.read(from: channel),
            !configuration.daemonUser.allows(daemonUID: daemon.uid, ownUID: getuid()),
            // The system daemon runs as a dynamic user, on a socket systemd made in a directory only root can
            // write to: only root can have put a daemon there.
            !NotifyCenter.DaemonUser.isRootOnlyDirectory(ofSocket: path)
        else { return nil }
        return .untrustedDaemon(path: path, uid: daemon.uid)
    }

    private func connectFailed(_ reason: String, error refusal: NotifyError? = nil) {
        let reconnects = configuration.reconnect.isEnabled
        let outcome = state.withLockedValue { state -> ([State.ConnectWaiter], Double)? in
            guard case .connecting = state.phase else { return nil }
            state.lastFailure = reason
            state.phase = .waitingToReconnect
            let failing = state.connectWaiters.filter { $0.value.failFast || !reconnects }
            for id in failing.keys { state.connectWaiters.removeValue(forKey: id) }
            return (Array(failing.values), retryDelay(&state))
        }
        guard let (waiters, delay) = outcome else { return }
        let error = refusal ?? NotifyError.cannotConnect(path: configuration.socketPath, reason: reason)
        for waiter in waiters { waiter.continuation.resume(throwing: error) }
        logger.debug("connection attempt failed", metadata: ["reason": "\(reason)"])
        scheduleReconnect(after: delay)
    }

    /// Schedules the next attempt, and watches the socket path meanwhile (on the I/O thread).
    private func scheduleReconnect(after delay: Double) {
        guard configuration.reconnect.isEnabled else { return }
        let task = eventLoop.scheduleTask(in: .nanoseconds(Int64(delay * 1e9))) { self.startConnecting() }
        // Stored after scheduling: the task runs on this thread, so it cannot start before this returns.
        state.withLockedValue { state in
            if case .waitingToReconnect = state.phase { state.reconnectTask = task }
        }
        watchSocketPath()
    }

    /// Starts watching the socket path unless a watch is already running (on the I/O thread).
    private func watchSocketPath() {
        let needed = state.withLockedValue { state in state.socketWatcher == nil && !isClosed(state) }
        guard needed else { return }
        guard
            let watcher = SocketPathWatcher.start(
                path: configuration.socketPath, on: eventLoop, onAppeared: { [weak self] in self?.socketAppeared() })
        else {
            logger.debug("cannot watch the socket path; reconnecting on the backoff alone")
            return
        }
        let kept = state.withLockedValue { state -> Bool in
            guard !isClosed(state), state.socketWatcher == nil else { return false }
            state.socketWatcher = watcher
            return true
        }
        if !kept { watcher.stop() }
    }

    /// The socket was created, moved into place or changed mode (on the I/O thread): connect now rather than
    /// when the backoff ends.
    private func socketAppeared() {
        let (connectNow, backoff) = state.withLockedValue { state -> (Bool, Scheduled<Void>?) in
            switch state.phase {
            case .waitingToReconnect:
                defer { state.reconnectTask = nil }
                return (true, state.reconnectTask)
            case .connecting, .handshaking:
                state.socketAppearedDuringAttempt = true
                return (false, nil)
            case .idle, .connected, .closed:
                return (false, nil)
            }
        }
        backoff?.cancel()
        guard connectNow else { return }
        logger.debug("the daemon's socket appeared; connecting")
        startConnecting()
    }

    /// The delay before the next attempt: none when the socket appeared during the failed one, else the backoff.
    private func retryDelay(_ state: inout State) -> Double {
        if state.socketAppearedDuringAttempt {
            state.socketAppearedDuringAttempt = false
            return 0
        }
        return nextDelay(&state)
    }

    private func nextDelay(_ state: inout State) -> Double {
        if let goodbye = state.goodbye {
            // A calm disconnect: the first attempt waits as long as the daemon asked (within the policy's
            // maximum); later ones back off from there rather than from the initial delay.
            state.goodbye = nil
            let delay = min(Double(goodbye.reconnectAfterMilliseconds) / 1_000, configuration.reconnect.maximumDelay)
            state.reconnectDelay = min(max(state.reconnectDelay, delay) * 2, configuration.reconnect.maximumDelay)
            return delay
        }
        let delay = state.reconnectDelay
        state.reconnectDelay = min(delay * 2, configuration.reconnect.maximumDelay)
        return delay
    }

    /// Called by the channel handler when a channel this core opened has closed.
    func channelClosed(_ channel: Channel, reason: String?) {
        var refusedWaiters: [State.ConnectWaiter] = []
        let outcome = state.withLockedValue { state -> (Bool, [State.PendingRequest], String) in
            guard let current = state.channel, current === channel else { return (false, [], "") }
            if case .handshaking = state.phase {
                // Closed before WELCOME: the daemon refused this connection (a quota, say). Callers that asked to
                // fail fast learn why now instead of waiting out their timeout.
                let failing = state.connectWaiters.filter { $0.value.failFast }
                for id in failing.keys { state.connectWaiters.removeValue(forKey: id) }
                refusedWaiters = Array(failing.values)
            }
            let why =
                state.goodbye.map { describeGoodbye($0) } ?? state.closingError.map { "daemon closed the connection: \($0)" }
                ?? reason ?? "connection closed by the daemon"
            state.phase = .waitingToReconnect
            state.lastFailure = why
            state.outgoing.clear()
            state.flushScheduled = false
            let pending = Array(state.pending.values)
            state.pending.removeAll()
            state.queryParts.removeAll()
            return (true, pending, why)
        }
        guard outcome.0 else { return }
        for waiter in refusedWaiters {
            waiter.continuation.resume(throwing: NotifyError.cannotConnect(path: configuration.socketPath, reason: outcome.2))
        }
        Self.fail(outcome.1, with: NotifyError.connectionLost(reason: outcome.2))
        logger.notice("disconnected from notifyd", metadata: ["reason": "\(outcome.2)"])
        emit(.disconnected(reason: outcome.2))
        scheduleReconnect(after: state.withLockedValue { retryDelay(&$0) })
    }

    /// Waits until the handshake has completed.
    ///
    /// - Parameters:
    ///   - failFast: throw ``NotifyError/cannotConnect(path:reason:)`` at the first failed attempt.
    ///   - timeout: give up after this many seconds.
    func waitUntilConnected(failFast: Bool, timeout: Double?) async throws {
        let waiterID = state.withLockedValue { state -> UInt64 in
            defer { state.nextWaiterID += 1 }
            return state.nextWaiterID
        }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            let immediate: Result<Void, Error>? = state.withLockedValue { state in
                switch state.phase {
                case .connected: return .success(())
                case .closed: return .failure(NotifyError.closed)
                case .waitingToReconnect where failFast:
                    return .failure(
                        NotifyError.cannotConnect(
                            path: configuration.socketPath, reason: state.lastFailure ?? "not connected"))
                case .idle, .connecting, .handshaking, .waitingToReconnect:
                    state.connectWaiters[waiterID] = State.ConnectWaiter(continuation: continuation, failFast: failFast)
                    return nil
                }
            }
            if let immediate {
                continuation.resume(with: immediate)
                return
            }
            if let timeout {
                eventLoop.scheduleTask(in: .nanoseconds(Int64(timeout * 1e9))) {
                    let waiter = self.state.withLockedValue { $0.connectWaiters.removeValue(forKey: waiterID) }
                    waiter?.continuation.resume(
                        throwing: NotifyError.timedOut(operation: "connecting to notifyd", seconds: timeout))
                }
            }
        }
    }

    // MARK: Incoming frames

    /// Handles one frame from `channel` (on the I/O thread).
    ///
    /// Notifications are staged in `staging` and reach their executors when the channel handler flushes it at
    /// the end of the read burst.
    func received(_ frame: ServerFrame, on channel: Channel, staging: DeliveryStaging) {
        switch frame {
        case .notification, .notificationMerged:
            break
        default:
            // Any other frame can complete something a caller waits on or reacts to (the PONG of `synchronize()`,
            // whose return promises that earlier notifications were handed to their executors; a current value,
            // which must come first; an OVERFLOW count; a connection event): what was read before it goes first.
            staging.flush()
            // An OVERFLOW count must reach the next notification of its subscription, which only the full path
            // attaches; ending the run at any such frame keeps the rule simple.
            staging.run.close()
        }
        switch frame {
        case .notification(let notification):
            deliver(notification, mergedCount: 0, staging: staging)
        case .notificationMerged(let mergedCount, let notification):
            deliver(notification, mergedCount: mergedCount, staging: staging)
        case .retained(let requestID, let notification):
            deliverRetained(notification, requestID: requestID)
        case .welcome(let welcome):
            handleWelcome(welcome, on: channel)
        case .ok(let requestID):
            handleOK(requestID)
        case .state(let requestID, let value):
            if case .state(let continuation) = state.withLockedValue({ $0.pending.removeValue(forKey: requestID) }) {
                continuation.resume(returning: value)
            }
        case .queryResultPart(let requestID, let json):
            state.withLockedValue { state in
                if state.pending[requestID] != nil { state.queryParts[requestID, default: []].append(json) }
            }
        case .queryResult(let requestID, let json):
            let (request, parts) = state.withLockedValue {
                ($0.pending.removeValue(forKey: requestID), $0.queryParts.removeValue(forKey: requestID) ?? [])
            }
            if case .query(let continuation) = request {
                continuation.resume(returning: parts.isEmpty ? json : Self.joinedArrays(parts + [json]))
            }
        case .pong(let requestID):
            let (request, rejected) = state.withLockedValue { state in
                let request = state.pending.removeValue(forKey: requestID)
                guard case .ping = request else { return (request, [(pattern: String, error: ErrorFrame)]()) }
                defer { state.rejectedSubscriptions.removeAll() }
                return (request, state.rejectedSubscriptions)
            }
            if case .ping(let continuation) = request {
                if let first = rejected.first {
                    continuation.resume(
                        throwing: NotifyError.rejected(
                            code: first.error.code, message: "subscribing to \(first.pattern): \(first.error.message)"))
                } else {
                    continuation.resume()
                }
            }
        case .posted(let requestID, let sequence, let delivered):
            if case .post(_, let continuation) = state.withLockedValue({ $0.pending.removeValue(forKey: requestID) }) {
                continuation.resume(returning: PostReceipt(sequence: sequence, deliveredCount: Int(delivered)))
            }
        case .overflow(let subscriptionID, let dropped):
            let pattern = state.withLockedValue { state -> String? in
                guard let key = state.keysByID[subscriptionID] else { return nil }
                state.pendingDrops[key, default: 0] += dropped
                return key.pattern
            }
            logger.warning(
                "the daemon dropped notifications for this client",
                metadata: ["count": "\(dropped)", "pattern": "\(pattern ?? "(connection)")"])
            emit(.notificationsDropped(count: dropped, pattern: pattern))
        case .error(let error):
            handleError(error)
        case .goodbye(let goodbye):
            state.withLockedValue { $0.goodbye = goodbye }
            logger.info(
                "notifyd is shutting down",
                metadata: ["reason": "\(goodbye.reason)", "reconnectAfterMs": "\(goodbye.reconnectAfterMilliseconds)"])
        }
    }

    /// The disconnect reason after `GOODBYE`; it keeps the `shutting-down` error code's name, which clients of the
    /// fatal `ERROR shutting-down` used before `GOODBYE` existed may look for.
    private func describeGoodbye(_ goodbye: GoodbyeFrame) -> String {
        let delay = min(Double(goodbye.reconnectAfterMilliseconds) / 1_000, configuration.reconnect.maximumDelay)
        let next = configuration.reconnect.isEnabled ? "reconnecting in \(Int((delay * 1_000).rounded())) ms" : "not reconnecting"
        return "daemon closed the connection: \(ErrorCode.shuttingDown): the daemon is shutting down (\(goodbye.reason)); \(next)"
    }

    private func handleWelcome(_ welcome: ServerFrame.Welcome, on channel: Channel) {
        let outcome = state.withLockedValue { state -> (restarted: Bool, waiters: [State.ConnectWaiter], watcher: SocketPathWatcher?)? in
            guard case .handshaking(let current) = state.phase, current === channel else { return nil }
            state.phase = .connected(channel, welcome)
            let watcher = state.socketWatcher
            state.socketWatcher = nil
            state.socketAppearedDuringAttempt = false
            let restarted = state.lastInstanceID.map { $0 != welcome.instanceID } ?? false
            state.lastInstanceID = welcome.instanceID
            state.reconnectDelay = configuration.reconnect.initialDelay
            state.lastFailure = nil
            let waiters = Array(state.connectWaiters.values)
            state.connectWaiters.removeAll()
            return (restarted, waiters, watcher)
        }
        guard let outcome else { return }
        outcome.watcher?.stop()
        logger.debug(
            "connected to notifyd",
            metadata: ["instance": "\(welcome.instanceID)", "daemonRestarted": "\(outcome.restarted)"])
        // The event first: a stream made once `connect()`/`waitUntilConnected()` returned starts after this
        // connection's event, rather than getting it or not depending on which thread ran first.
        emit(.connected(daemonRestarted: outcome.restarted, instanceID: welcome.instanceID))
        for waiter in outcome.waiters { waiter.continuation.resume() }
    }

    private func handleError(_ error: ErrorFrame) {
        if error.closesConnection {
            state.withLockedValue { $0.closingError = error }
            logger.notice("notifyd is closing the connection", metadata: ["error": "\(error)"])
            return
        }
        let request = state.withLockedValue { $0.pending.removeValue(forKey: error.requestID) }
        let rejection = NotifyError.rejected(code: error.code, message: error.message)
        switch request {
        case .ping(let continuation), .acknowledged(let continuation):
            continuation.resume(throwing: rejection)
        case .post(_, let continuation):
            continuation.resume(throwing: rejection)
        case .state(let continuation):
            continuation.resume(throwing: rejection)
        case .query(let continuation):
            continuation.resume(throwing: rejection)
        case .subscribe(let name):
            state.withLockedValue { $0.rejectedSubscriptions.append((name, error)) }
            logger.error("subscription rejected", metadata: ["name": "\(name)", "error": "\(error)"])
            emit(.requestRejected(operation: "subscribe to \(name)", error: error.description))
        case .currentValue(let core, _):
            state.withLockedValue { $0.rejectedSubscriptions.append((core.name, error)) }
            core.finishWaitingForCurrentValue()
            logger.error("subscription rejected", metadata: ["name": "\(core.name)", "error": "\(error)"])
            emit(.requestRejected(operation: "subscribe to \(core.name)", error: error.description))
        case .unsubscribe(let name):
            logger.debug("unsubscribe rejected", metadata: ["name": "\(name)", "error": "\(error)"])
        case .housekeeping(let operation):
            logger.error("request rejected", metadata: ["operation": "\(operation)", "error": "\(error)"])
            emit(.requestRejected(operation: operation, error: error.description))
        case nil:
            let operation = error.requestID & 0x8000_0000 != 0 ? "post" : "request \(error.requestID)"
            logger.error("request rejected", metadata: ["operation": "\(operation)", "error": "\(error)"])
            emit(.requestRejected(operation: operation, error: error.description))
        }
    }

    /// Delivers a `NOTIFICATION` (its fields, undecoded) that continues the current ``NotificationRun``; returns
    /// `false`, having done nothing, when it does not (another name, routing changed, no run, or a layout the
    /// full decoder must judge), and the caller then decodes it and calls ``received(_:on:staging:)``.
    func deliverContinuingRun(_ fields: ByteBuffer, staging: DeliveryStaging) -> Bool {
        guard staging.run.isOpen else { return false }
        let generation = routingGeneration.load(ordering: .acquiring)
        return fields.withUnsafeReadableBytes { bytes in
            guard let fields = NotificationFrame.InPlaceFields(fields: bytes),
                staging.run.continues(name: fields.name, generation: generation)
            else { return false }
            let observers = staging.run.observers
            guard !observers.isEmpty else { return true }
            let notification = ReceivedNotification(
                name: staging.run.name, storage: staging.storePayload(fields.payload), sequence: fields.sequence,
                sender: fields.sender)
            // The last observer (usually the only one) takes the notification itself rather than a copy.
            for observer in observers.dropLast() where !observer.isWaitingForCurrentValue {
                staging.add(notification, for: observer)
            }
            let last = observers[observers.count - 1]
            if !last.isWaitingForCurrentValue {
                staging.add(consume notification, for: last)
            }
            return true
        }
    }

    private func deliver(_ frame: NotificationFrame, mergedCount: UInt64, staging: DeliveryStaging) {
        // A reused buffer: a fresh array per notification was one of its allocations.
        var targets = staging.takeTargetBuffer()
        let generation = state.withLockedValue { state -> UInt64 in
            if let exact = state.exactObservers[ExactName(frame.name)] {
                for core in exact { targets.append((core, Self.takeDrops(for: core.key, &state))) }
            }
            for key in state.patternKeys {
                guard let entry = state.subscriptions[key], entry.pattern.matches(frame.name) else { continue }
                let drops = Self.takeDrops(for: key, &state)
                for core in entry.observations { targets.append((core, drops)) }
            }
            return routingGeneration.load(ordering: .relaxed)
        }
        if !targets.isEmpty {
            var notification = ReceivedNotification(
                name: frame.name, storage: frame.payload.withUnsafeReadableBytes { staging.storePayload($0) },
                sequence: frame.sequence, sender: frame.sender)
            notification.mergedCount = mergedCount
            for (observer, drops) in targets where !observer.isWaitingForCurrentValue {
                notification.droppedBefore = drops
                staging.add(notification, for: observer)
            }
        }
        // The notifications after this one on the same name go to the same observers (their drop counts were
        // just taken; new ones arrive in an OVERFLOW frame, which ends the run).
        staging.run.open(name: frame.name, generation: generation, observers: targets.lazy.map(\.0))
        // Moved back, not copied: a second reference would make the buffer reallocate on its next use.
        staging.returnTargetBuffer(consume targets)
    }

    /// The `OVERFLOW` count waiting for the next notification of `key`, cleared; skips hashing the key in the
    /// usual case of no drops at all.
    private static func takeDrops(for key: SubscriptionKey, _ state: inout State) -> UInt64 {
        if state.pendingDrops.isEmpty { return 0 }
        return state.pendingDrops.removeValue(forKey: key) ?? 0
    }

    /// A retained notification answers one observation's request for the current value: only it receives it.
    private func deliverRetained(_ frame: NotificationFrame, requestID: UInt32) {
        guard case .currentValue(let core, _) = state.withLockedValue({ $0.pending[requestID] }) else { return }
        var notification = ReceivedNotification(
            name: frame.name, payload: Array(frame.payload.readableBytesView), sequence: frame.sequence,
            sender: frame.sender)
        notification.isRetained = true
        core.deliver(notification)
    }

    private func handleOK(_ requestID: UInt32) {
        let (request, schedule) = state.withLockedValue { state -> (State.PendingRequest?, Bool) in
            let request = state.pending.removeValue(forKey: requestID)
            // The probe subscription only existed to fetch the current value: drop it again.
            guard case .currentValue(_, let probe?) = request, state.channel != nil else { return (request, false) }
            let unsubscribeID = state.makeRequestID()
            state.pending[unsubscribeID] = .housekeeping(operation: "unsubscribe current-value probe")
            return (request, enqueueLocked(.unsubscribe(requestID: unsubscribeID, subscriptionID: probe), &state))
        }
        if schedule { scheduleFlush() }
        switch request {
        case .acknowledged(let continuation): continuation.resume()
        case .currentValue(let core, _): core.finishWaitingForCurrentValue()
        default: break
        }
    }

    // MARK: Outgoing frames

    /// Appends a frame for the daemon; frames appended by any thread are written in append order, batched
    /// into one write per I/O-thread turn.
    private func enqueueLocked(_ frame: ClientFrame, _ state: inout State) -> Bool {
        frame.encode(into: &state.outgoing)
        return state.claimFlush()
    }

    private func scheduleFlush() {
        eventLoop.execute { self.flushOutgoing() }
    }

    /// Flush rounds in one turn of the I/O thread before it lets other work run (see ``flushOutgoing()``).
    private static let maxFlushRounds = 16

    /// Writes what was appended, and keeps writing while posters go on appending during its writes (up to
    /// ``maxFlushRounds``): a steady poster's frames then go out in batches as large as one write takes to
    /// make, without a wake-up of the I/O thread per batch. `flushScheduled` stays set until a round finds
    /// nothing, which tells posters that their frames will be picked up.
    private func flushOutgoing() {
        var capacity = 4_096
        for _ in 0..<Self.maxFlushRounds {
            // Allocated before taking the lock, which posters wait on.
            var fresh = allocator.buffer(capacity: capacity)
            let batch = state.withLockedValue { state -> (Channel, ByteBuffer)? in
                guard let channel = state.channel, state.outgoing.readableBytes > 0 else {
                    state.flushScheduled = false
                    return nil
                }
                swap(&fresh, &state.outgoing)
                return (channel, fresh)
            }
            guard let (channel, bytes) = batch else { return }
            capacity = min(max(bytes.readableBytes, 256), 65_536)
            channel.writeAndFlush(bytes, promise: nil)
        }
        // Posters are still appending: other events on this loop go first, then the next round.
        scheduleFlush()
    }

    // MARK: Requests

    /// Posts without waiting, encoding straight from the caller's bytes into the outgoing buffer.
    func post(_ name: String, payload: UnsafeRawBufferPointer, retain: Bool = false) throws(NotifyError) {
        if NotificationName.isProcessLocal(name) {
            try validate(name)
            postLocally(name, payload: payload)
            return
        }
        let outcome = state.withLockedValue { state -> Result<Bool, NotifyError> in
            do throws(NotifyError) {
                // Posters usually repeat a name: it is checked against the grammar once, not on every post.
                if state.lastPostedName != ExactName(name) {
                    try validate(name)
                    state.lastPostedName = ExactName(name)
                }
                try checkPayload(size: payload.count, state.limits)
            } catch {
                return .failure(error)
            }
            guard state.postingLimits != nil else { return holdLocked(name, ByteBuffer(bytes: payload), &state) }
            ClientFrame.Post.encode(
                requestID: state.makeUnacknowledgedPostID(), flags: retain ? .retain : [], name: name, payload: payload,
                into: &state.outgoing)
            return .success(state.claimFlush())
        }
        if try outcome.get() { scheduleFlush() }
    }

    func postAcknowledged(_ name: String, payload: ByteBuffer, retain: Bool = false) async throws -> PostReceipt {
        try validate(name)
        if NotificationName.isProcessLocal(name) {
            let delivered = payload.withUnsafeReadableBytes { postLocally(name, payload: $0) }
            return PostReceipt(sequence: 0, deliveredCount: delivered > 0 ? 1 : 0)
        }
        try await waitForConnectionIfConfigured()
        return try await withCheckedThrowingContinuation { continuation in
            let outcome = state.withLockedValue { state -> Result<Bool, NotifyError> in
                guard state.channel != nil else { return .failure(notConnectedError(state)) }
                do throws(NotifyError) { try checkPayload(size: payload.readableBytes, state.limits) } catch { return .failure(error) }
                let requestID = state.makeRequestID()
                state.pending[requestID] = .post(name: name, continuation)
                let post = ClientFrame.Post(
                    requestID: requestID, flags: retain ? [.ackWanted, .retain] : .ackWanted, name: name, payload: payload)
                return .success(enqueueLocked(.post(post), &state))
            }
            switch outcome {
            case .failure(let error): continuation.resume(throwing: error)
            case .success(let schedule): if schedule { scheduleFlush() }
            }
        }
    }

    func synchronize() async throws {
        try await waitForConnectionIfConfigured()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            let outcome = state.withLockedValue { state -> Result<Bool, NotifyError> in
                guard state.channel != nil else { return .failure(notConnectedError(state)) }
                let requestID = state.makeRequestID()
                state.pending[requestID] = .ping(continuation)
                return .success(enqueueLocked(.ping(requestID: requestID), &state))
            }
            switch outcome {
            case .failure(let error): continuation.resume(throwing: error)
            case .success(let schedule): if schedule { scheduleFlush() }
            }
        }
    }

    private func waitForConnectionIfConfigured() async throws {
        guard case .wait(let timeout) = configuration.whileDisconnected else { return }
        let connected = state.withLockedValue { $0.channel != nil }
        if !connected { try await waitUntilConnected(failFast: false, timeout: timeout) }
    }

    /// Keeps a post made while disconnected, if the configuration says to wait.
    private func holdLocked(_ name: String, _ payload: ByteBuffer, _ state: inout State) -> Result<Bool, NotifyError> {
        guard case .wait(let timeout) = configuration.whileDisconnected, !isClosed(state) else {
            return .failure(notConnectedError(state))
        }
        guard state.held.count < 10_000 else { return .failure(notConnectedError(state)) }
        state.held.append((.now() + .nanoseconds(Int64(timeout * 1e9)), name, payload))
        if !state.heldExpiryScheduled {
            state.heldExpiryScheduled = true
            let deadline = state.held[0].deadline
            eventLoop.scheduleTask(deadline: deadline) { self.expireHeldPosts() }
        }
        return .success(false)
    }

    private func expireHeldPosts() {
        let (expired, next) = state.withLockedValue { state -> (Int, NIODeadline?) in
            let now = NIODeadline.now()
            let count = state.held.prefix { $0.deadline <= now }.count
            state.held.removeFirst(count)
            state.heldExpiryScheduled = !state.held.isEmpty
            return (count, state.held.first?.deadline)
        }
        if let next { eventLoop.scheduleTask(deadline: next) { self.expireHeldPosts() } }
        if expired > 0 {
            logger.warning("posts made while disconnected expired", metadata: ["count": "\(expired)"])
            emit(.postsExpired(count: expired))
        }
    }

    private func isClosed(_ state: State) -> Bool {
        if case .closed = state.phase { return true }
        return false
    }

    @discardableResult
    private func postLocally(_ name: String, payload: UnsafeRawBufferPointer) -> Int {
        let observers = state.withLockedValue { state -> [ObservationCore] in
            var observers = state.exactObservers[ExactName(name)] ?? []
            for key in state.patternKeys where state.subscriptions[key]?.pattern.matches(name) == true {
                observers += state.subscriptions[key]!.observations
            }
            return observers
        }
        guard !observers.isEmpty else { return 0 }
        let notification = ReceivedNotification(name: name, payload: Array(payload), sequence: 0, sender: localSender)
        for observer in observers { observer.deliver(notification) }
        return observers.count
    }

    // MARK: Observations

    func addObservation(
        _ patternText: String, target: DeliveryTarget, options: ObservationOptions,
        handler: @escaping @Sendable (ReceivedNotification) -> Void
    ) throws(NotifyError) -> ObservationCore {
        let pattern: NotificationPattern
        do {
            pattern = try NotificationPattern(patternText)
        } catch {
            throw NotifyError.invalidName(error)
        }
        let key = SubscriptionKey(pattern: patternText, policy: options.policy)
        let isLocal = NotificationName.isProcessLocal(patternText)
        let (core, schedule) = state.withLockedValue { state -> (ObservationCore, Bool) in
            let id = state.nextObservationID
            state.nextObservationID += 1
            routingGeneration.wrappingIncrement(ordering: .releasing)
            let core = ObservationCore(
                id: id, name: patternText, key: key, executor: target.makeExecutor(label: "notify.observation.\(id)"),
                handler: handler)
            if pattern.hasWildcards {
                state.patternKeys.insert(key)
            } else {
                state.exactObservers[ExactName(patternText), default: []].append(core)
            }
            let isNew = state.subscriptions[key] == nil
            if isNew {
                let subscriptionID = state.makeSubscriptionID()
                state.subscriptions[key] = State.SubscriptionEntry(id: subscriptionID, pattern: pattern, observations: [core])
                state.keysByID[subscriptionID] = key
            } else {
                state.subscriptions[key]!.observations.append(core)
            }
            guard !isLocal, state.channel != nil else { return (core, false) }
            let wantsCurrent = options.receivesCurrentValue
            if !isNew && !wantsCurrent { return (core, false) }
            let requestID = state.makeRequestID()
            var subscriptionID = state.subscriptions[key]!.id
            var probe: UInt32?
            if !isNew {
                // An existing subscription cannot fetch the current value for one new observation: a short-lived
                // extra subscription does, atomically with its registration in the daemon.
                subscriptionID = state.makeSubscriptionID()
                probe = subscriptionID
            }
            if wantsCurrent {
                core.beginWaitingForCurrentValue()
                state.pending[requestID] = .currentValue(core, probe: probe)
            } else {
                state.pending[requestID] = .subscribe(pattern: patternText)
            }
            let frame = ClientFrame.subscribe(
                .init(
                    requestID: requestID, subscriptionID: subscriptionID, flags: wantsCurrent ? .sendRetained : [],
                    policy: options.policy, pattern: patternText))
            return (core, enqueueLocked(frame, &state))
        }
        if schedule { scheduleFlush() }
        if isLocal, options.receivesCurrentValue { core.finishWaitingForCurrentValue() }
        return core
    }

    func remove(_ core: ObservationCore) {
        let key = core.key
        let schedule = state.withLockedValue { state -> Bool in
            routingGeneration.wrappingIncrement(ordering: .releasing)
            if var exact = state.exactObservers[ExactName(key.pattern)] {
                exact.removeAll { $0 === core }
                state.exactObservers[ExactName(key.pattern)] = exact.isEmpty ? nil : exact
            }
            guard var entry = state.subscriptions[key] else { return false }
            entry.observations.removeAll { $0 === core }
            guard entry.observations.isEmpty else {
                state.subscriptions[key] = entry
                return false
            }
            state.subscriptions.removeValue(forKey: key)
            state.keysByID.removeValue(forKey: entry.id)
            state.patternKeys.remove(key)
            state.pendingDrops.removeValue(forKey: key)
            guard !NotificationName.isProcessLocal(key.pattern), state.channel != nil else { return false }
            let requestID = state.makeRequestID()
            state.pending[requestID] = .unsubscribe(pattern: key.pattern)
            return enqueueLocked(.unsubscribe(requestID: requestID, subscriptionID: entry.id), &state)
        }
        if schedule { scheduleFlush() }
    }

    // MARK: State, suspension, introspection

    /// Sends a request built with a fresh request id and waits for its answer.
    private func request<Value: Sendable>(
        _ make: (UInt32) -> ClientFrame,
        pending: (CheckedContinuation<Value, Error>) -> State.PendingRequest,
        onSent: @Sendable (inout State) -> Void = { _ in }
    ) async throws -> Value {
        try await waitForConnectionIfConfigured()
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, Error>) in
            let outcome = state.withLockedValue { state -> Result<Bool, NotifyError> in
                guard state.channel != nil else { return .failure(notConnectedError(state)) }
                let requestID = state.makeRequestID()
                state.pending[requestID] = pending(continuation)
                onSent(&state)
                return .success(enqueueLocked(make(requestID), &state))
            }
            switch outcome {
            case .failure(let error): continuation.resume(throwing: error)
            case .success(let schedule): if schedule { scheduleFlush() }
            }
        }
    }

    func setState(_ value: UInt64, for name: String) async throws {
        try validate(name)
        try await request({ .setState(requestID: $0, name: name, value: value) }, pending: { .acknowledged($0) })
    }

    func state(of name: String) async throws -> UInt64? {
        try validate(name)
        return try await request({ .getState(requestID: $0, name: name) }, pending: { .state($0) })
    }

    func suspend() async throws {
        try await request({ .suspend(requestID: $0) }, pending: { .acknowledged($0) }, onSent: { $0.suspendCount += 1 })
    }

    func resume() async throws {
        let suspended = state.withLockedValue { $0.suspendCount > 0 }
        guard suspended else { throw NotifyError.rejected(code: .invalidRequest, message: "resume() without a matching suspend()") }
        try await request({ .resume(requestID: $0) }, pending: { .acknowledged($0) }, onSent: { $0.suspendCount -= 1 })
    }

    func query(_ kind: QueryKind, argument: String) async throws -> ByteBuffer {
        // Lists may be longer than a frame: take them in parts.
        guard kind != .status else {
            return try await request({ .query(requestID: $0, kind: kind.rawValue, argument: argument) }, pending: { .query($0) })
        }
        do {
            return try await request(
                { .query(requestID: $0, kind: kind.rawValue | QueryKind.partsFlag, argument: argument) },
                pending: { .query($0) })
        } catch NotifyError.rejected(code: .invalidRequest, let message) where message.hasPrefix("unknown query kind") {
            // A daemon from before answers in parts does not know the flag: ask it the old way.
            return try await request({ .query(requestID: $0, kind: kind.rawValue, argument: argument) }, pending: { .query($0) })
        }
    }

    /// One JSON array holding the elements of `arrays` in order (each a JSON array as the daemon writes it).
    static func joinedArrays(_ arrays: [ByteBuffer]) -> ByteBuffer {
        var joined = ByteBuffer()
        joined.reserveCapacity(arrays.reduce(0) { $0 + $1.readableBytes })
        joined.writeStaticString("[")
        var first = true
        for array in arrays {
            // Between the brackets, if anything.
            guard array.readableBytes > 2, let inner = array.getSlice(at: array.readerIndex + 1, length: array.readableBytes - 2)
            else { continue }
            if !first { joined.writeStaticString(",") }
            joined.writeImmutableBuffer(inner)
            first = false
        }
        joined.writeStaticString("]")
        return joined
    }

    // MARK: Events

    func connectionEvents() -> AsyncStream<ConnectionEvent> {
        let (stream, continuation) = AsyncStream<ConnectionEvent>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let id = state.withLockedValue { state -> UInt64? in
            if case .closed = state.phase { return nil }
            let id = state.nextWaiterID
            state.nextWaiterID += 1
            state.eventContinuations[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLockedValue { $0.eventContinuations.removeValue(forKey: id) }
        }
        return stream
    }

    func reportDecodingFailure(_ failure: MessageDecodingError) {
        logger.error(
            "typed payload does not decode",
            metadata: ["name": "\(failure.name)", "type": "\(failure.typeName)", "reason": "\(failure.reason)",
                "senderPID": "\(failure.notification.sender.pid)"])
        emit(.messageDecodingFailed(failure))
    }

    private func emit(_ event: ConnectionEvent) {
        let streams = state.withLockedValue { Array($0.eventContinuations.values) }
        for stream in streams { stream.yield(event) }
    }

    // MARK: Helpers

    private func validate(_ name: String) throws(NotifyError) {
        try NotifyCenter.validate(name: name)
    }

    private func checkPayload(size: Int, _ limits: ServerLimits) throws(NotifyError) {
        if size > Int(limits.maxPayloadLength) {
            throw NotifyError.payloadTooLarge(size: size, limit: Int(limits.maxPayloadLength))
        }
    }

    private func notConnectedError(_ state: State) -> NotifyError {
        if case .closed = state.phase { return .closed }
        return .notConnected(path: configuration.socketPath)
    }

    private static func fail(_ requests: [State.PendingRequest], with error: Error) {
        for request in requests {
            switch request {
            case .ping(let continuation), .acknowledged(let continuation): continuation.resume(throwing: error)
            case .post(_, let continuation): continuation.resume(throwing: error)
            case .state(let continuation): continuation.resume(throwing: error)
            case .query(let continuation): continuation.resume(throwing: error)
            case .currentValue(let core, _): core.finishWaitingForCurrentValue()
            case .subscribe, .unsubscribe, .housekeeping: break
            }
        }
    }

    static func describe(_ error: Error) -> String {
        if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
        return "\(error)"
    }
}

/// A daemon subscription's identity in the library: the pattern and the policy.
struct SubscriptionKey: Hashable, Sendable {
    /// Compared byte for byte, as the daemon compares names.
    private var exactPattern: ExactName
    var policy: DeliveryPolicy

    init(pattern: String, policy: DeliveryPolicy) {
        self.exactPattern = ExactName(pattern)
        self.policy = policy
    }

    var pattern: String { exactPattern.string }
}
