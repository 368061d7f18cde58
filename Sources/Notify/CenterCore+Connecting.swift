#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOCore
import NIOPosix
import NotifyWire

// Connecting, the handshake, reconnecting, and waiting for a connection: the I/O the connection state machine
// asks for. Everything here but `waitUntilConnected` runs on the I/O thread.
extension CenterCore {
    func startConnecting() {
        let proceed = state.withLockedValue { state -> Bool in
            guard state.connection.startConnecting() else { return false }
            state.reconnectTask = nil
            return true
        }
        guard proceed else { return }
        ClientBootstrap(group: eventLoop)
            .channelOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 1024, initial: 16_384, maximum: 1 << 20)
            )
            // Past 4 MiB unwritten the channel is not written to: the rest waits in the outbound buffer, bounded.
            .channelOption(ChannelOptions.writeBufferWaterMark, value: .init(low: 1 << 20, high: 4 << 20))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(DaemonChannelHandler(core: self))
                }
            }
            .connect(unixDomainSocketPath: configuration.socketPath)
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
            guard case .handshake(let suspendDepth) = state.connection.connectionEstablished(DaemonConnection(channel: channel))
            else { return false }
            // HELLO first, then every live subscription, pipelined without waiting for WELCOME.
            state.outbound.startConnection()
            let flags = HelloFlags.origins | (configuration.receivesOwnPosts ? 0 : HelloFlags.noEcho)
            _ = state.outbound.append(.hello(.init(flags: flags, clientName: configuration.clientName)))
            for (key, id, observations) in state.registry.daemonSubscriptions {
                if key.watchesStates {
                    // The values may have changed meanwhile: observations that started with them get them again.
                    _ = state.sendStateSubscription(
                        pattern: key.pattern, subscriptionID: id,
                        sendingCurrentTo: observations.filter(\.sendsCurrentStates), probe: nil)
                    continue
                }
                // Observations that start with the current value get it on every connection: the first may be this
                // one (observed before connecting), and a value may have been retained while disconnected.
                let wanting = observations.filter(\.receivesCurrentValue)
                for core in wanting { core.beginWaitingForCurrentValue() }
                let request: PendingRequests.Request =
                    wanting.isEmpty ? .subscribe(pattern: key.pattern) : .currentValue(wanting, probe: nil)
                let flags = wanting.isEmpty ? key.subscribeFlags : key.subscribeFlags.union(.sendRetained)
                _ = state.sendRequest(request) {
                    .subscribe(
                        .init(requestID: $0, subscriptionID: id, flags: flags, policy: key.policy.wire, pattern: key.pattern))
                }
            }
            for _ in 0..<suspendDepth {
                _ = state.sendRequest(.housekeeping(operation: "suspend (replayed after reconnecting)")) {
                    .suspend(requestID: $0)
                }
            }
            for post in state.held.takeAll() { state.outbound.appendHeldPost(post) }
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
        guard let outcome = state.withLockedValue({ $0.connection.connectFailed(reason: reason) }) else { return }
        let error = refusal ?? NotifyError.cannotConnect(path: configuration.socketPath, reason: reason)
        for waiter in outcome.failing { waiter.resume(throwing: error) }
        logger.debug("connection attempt failed", metadata: ["reason": "\(reason)"])
        scheduleReconnect(after: outcome.reconnectAfter)
    }

    /// Called by the channel handler when a channel this core opened has closed.
    func channelClosed(_ channel: Channel, reason: String?) {
        let outcome = state.withLockedValue { state -> (Connection.Disconnected, [PendingRequests.Request])? in
            guard let disconnected = state.connection.connectionClosed(DaemonConnection(channel: channel), reason: reason)
            else { return nil }
            state.outbound.discard()
            let pending = state.pending.removeAll()
            // A suspension that fails with its connection is not replayed on the next (its caller hears it failed).
            for request in pending where request.isSuspension { state.connection.suspensionFailed() }
            return (disconnected, pending)
        }
        guard let (disconnected, pending) = outcome else { return }
        let why = disconnected.reason
        for waiter in disconnected.failing {
            waiter.resume(throwing: NotifyError.cannotConnect(path: configuration.socketPath, reason: why))
        }
        for request in pending { request.complete(with: .failure(NotifyError.connectionLost(reason: why))) }
        logger.notice("disconnected from notifyd", metadata: ["reason": "\(why)"])
        emit(.disconnected(reason: why))
        scheduleReconnect(after: disconnected.reconnectAfter)
    }

    /// Completes the handshake on `channel` (the daemon's `WELCOME`).
    func handleWelcome(_ welcome: ServerFrame.Welcome, on channel: Channel) {
        let outcome = state.withLockedValue { state -> (Connection.Welcomed, SocketPathWatcher?)? in
            guard let welcomed = state.connection.welcome(welcome, on: DaemonConnection(channel: channel)) else { return nil }
            defer { state.socketWatcher = nil }
            return (welcomed, state.socketWatcher)
        }
        guard let (welcomed, watcher) = outcome else { return }
        watcher?.stop()
        logger.debug(
            "connected to notifyd",
            metadata: ["instance": "\(welcome.instanceID)", "daemonRestarted": "\(welcomed.daemonRestarted)"])
        // The event first: a stream made once `connect()`/`waitUntilConnected()` returned starts after this
        // connection's event, rather than getting it or not depending on which thread ran first.
        emit(.connected(daemonRestarted: welcomed.daemonRestarted, instanceID: welcome.instanceID))
        for waiter in welcomed.waiters { waiter.resume() }
    }

    /// Schedules the next attempt, and watches the socket path meanwhile (`nil`: the policy does not reconnect).
    private func scheduleReconnect(after delay: Double?) {
        guard let delay else { return }
        let task = eventLoop.scheduleTask(in: .seconds(saturating: delay)) { self.startConnecting() }
        // Stored after scheduling: the task runs on this thread, so it cannot start before this returns.
        state.withLockedValue { state in
            if case .waitingToReconnect = state.connection.phase { state.reconnectTask = task }
        }
        watchSocketPath()
    }

    /// Starts watching the socket path unless a watch is already running.
    private func watchSocketPath() {
        let needed = state.withLockedValue { state in state.socketWatcher == nil && !state.connection.isClosed }
        guard needed else { return }
        guard
            let watcher = SocketPathWatcher.start(
                path: configuration.socketPath, on: eventLoop, onAppeared: { [weak self] in self?.socketAppeared() })
        else {
            logger.debug("cannot watch the socket path; reconnecting on the backoff alone")
            return
        }
        let kept = state.withLockedValue { state -> Bool in
            guard !state.connection.isClosed, state.socketWatcher == nil else { return false }
            state.socketWatcher = watcher
            return true
        }
        if !kept { watcher.stop() }
    }

    /// The socket was created, moved into place or changed mode: connect now rather than when the backoff ends.
    private func socketAppeared() {
        let (connectNow, backoff) = state.withLockedValue { state -> (Bool, Scheduled<Void>?) in
            guard case .connectNow = state.connection.socketAppeared() else { return (false, nil) }
            defer { state.reconnectTask = nil }
            return (true, state.reconnectTask)
        }
        backoff?.cancel()
        guard connectNow else { return }
        logger.debug("the daemon's socket appeared; connecting")
        startConnecting()
    }

    /// Waits until the handshake has completed (from any thread).
    ///
    /// - Parameters:
    ///   - failFast: throw ``NotifyError/cannotConnect(path:reason:)`` at the first failed attempt.
    ///   - timeout: give up after this many seconds.
    func waitUntilConnected(failFast: Bool, timeout: Double?) async throws {
        let waiterID = state.withLockedValue { $0.makeWaiterID() }
        // Cancelling the task ends the wait with CancellationError, as for requests.
        try await withTaskCancellationHandler {
            try await waitForConnection(id: waiterID, failFast: failFast, timeout: timeout)
        } onCancel: {
            state.withLockedValue { $0.connection.removeWaiter(id: waiterID) }?.resume(throwing: CancellationError())
        }
    }

    private func waitForConnection(id waiterID: UInt64, failFast: Bool, timeout: Double?) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            let action = state.withLockedValue {
                $0.connection.addWaiter(continuation, id: waiterID, failFast: failFast)
            }
            // Cancelled before the waiter was added: the handler found nothing to remove.
            if case .waiting = action, Task.isCancelled,
                let waiter = state.withLockedValue({ $0.connection.removeWaiter(id: waiterID) })
            {
                waiter.resume(throwing: CancellationError())
                return
            }
            switch action {
            case .connected:
                continuation.resume()
            case .closed:
                continuation.resume(throwing: NotifyError.closed)
            case .failed(let reason):
                continuation.resume(throwing: NotifyError.cannotConnect(path: configuration.socketPath, reason: reason))
            case .waiting:
                guard let timeout else { return }
                eventLoop.scheduleTask(in: .seconds(saturating: timeout)) {
                    let waiter = self.state.withLockedValue { $0.connection.removeWaiter(id: waiterID) }
                    waiter?.resume(throwing: NotifyError.timedOut(operation: "connecting to notifyd", seconds: timeout))
                }
            }
        }
    }
}
