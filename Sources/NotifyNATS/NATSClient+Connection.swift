import Logging
import NIOCore
import NIOPosix

/// The connection's life: connect through the pool, handshake, serve, and reconnect with backoff. All of it runs
/// on the client's event loop.
extension NATSClient {
    func connectNext() {
        eventLoop.preconditionInEventLoop()
        let target: NATSServerAddress? = state.withLockedValue { state in
            guard case .idle = state.phase else { return nil }
            state.phase = .connecting
            let server = state.pool[state.nextServer % state.pool.count]
            state.nextServer += 1
            state.currentServer = server
            return server
        }
        guard let target else { return }
        ClientBootstrap(group: eventLoop)
            .connectTimeout(configuration.connectTimeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers(
                        ByteToMessageHandler(NATSOperationDecoder()), NATSConnectionHandler(client: self)
                    )
                }
            }
            .connect(host: target.host, port: target.port)
            .whenComplete { result in
                switch result {
                case .success(let channel): self.connected(channel, to: target)
                case .failure(let error): self.attemptFailed(target, reason: "\(error)")
                }
            }
    }

    private func connected(_ channel: any Channel, to server: NATSServerAddress) {
        let keep = state.withLockedValue { state -> Bool in
            guard case .connecting = state.phase else { return false }
            state.phase = .handshaking(channel, sentConnect: false)
            return true
        }
        guard keep else {
            channel.close(promise: nil)
            return
        }
        logger.debug("NATS: connected to \(server), waiting for INFO")
        // A server that accepts but never completes the handshake is given up like one that refused.
        eventLoop.scheduleTask(in: configuration.connectTimeout) {
            let stuck = self.state.withLockedValue { state -> Bool in
                if case .handshaking(let current, _) = state.phase, current === channel { return true }
                return false
            }
            if stuck { channel.close(promise: nil) }
        }
    }

    private func attemptFailed(_ server: NATSServerAddress, reason: String) {
        let delay = state.withLockedValue { state -> TimeAmount? in
            guard case .connecting = state.phase else { return nil }
            state.phase = .idle
            state.statistics.connectFailures += 1
            state.failedAttempts += 1
            return backoff(failures: state.failedAttempts)
        }
        guard let delay else { return }
        logger.debug("NATS: cannot connect to \(server): \(reason); next attempt in \(delay.nanoseconds / 1_000_000) ms")
        eventLoop.scheduleTask(in: delay) { self.connectNext() }
    }

    func backoff(failures: Int) -> TimeAmount {
        let initial = configuration.reconnectInitialDelay.nanoseconds
        let doubled = initial << min(failures - 1, 20)
        let capped = min(doubled, configuration.reconnectMaxDelay.nanoseconds)
        // Up to a quarter of jitter, so bridges that lost the same server do not come back in lockstep.
        return .nanoseconds(capped - Int64.random(in: 0...max(capped / 4, 0)))
    }

    /// An operation from the server on `channel`.
    func handle(_ operation: NATSServerOperation, on channel: any Channel) {
        switch operation {
        case .ping:
            var buffer = channel.allocator.buffer(capacity: 6)
            NATSClientOperation.writePong(to: &buffer)
            channel.writeAndFlush(buffer, promise: nil)
        case .info(let info):
            receivedInfo(info, on: channel)
        case .pong:
            receivedPong(on: channel)
        case .message(let message):
            let handler = state.withLockedValue { state -> (@Sendable (NATSMessage) -> Void)? in
                guard state.phase.channel === channel, let entry = state.subscriptions[message.sid] else { return nil }
                state.statistics.received += 1
                return entry.handler
            }
            handler?(message)
        case .ok:
            break
        case .error(let text):
            state.withLockedValue { $0.statistics.serverErrors += 1 }
            logger.warning("NATS server error: \(text)")
            eventContinuation.yield(.serverError(text))
        }
    }

    private func receivedInfo(_ info: NATSServerInfo, on channel: any Channel) {
        let handshake = state.withLockedValue { state -> ByteBuffer? in
            guard state.phase.channel === channel else { return nil }
            state.maxPayload = info.maxPayload
            state.learn(connectURLs: info.connectURLs)
            guard case .handshaking(_, sentConnect: false) = state.phase else { return nil }
            state.phase = .handshaking(channel, sentConnect: true)
            return state.handshake(name: configuration.name, echo: configuration.echo)
        }
        if let handshake { channel.writeAndFlush(handshake, promise: nil) }
    }

    private func receivedPong(on channel: any Channel) {
        enum Outcome {
            case handshakeDone(
                [EventLoopPromise<Void>], [EventLoopPromise<Void>], NATSServerAddress?,
                reconnected: [@Sendable (LifecycleEvent) -> Void]
            )
            case answered(EventLoopPromise<Void>?)
            case ignored
        }
        let outcome = state.withLockedValue { state -> Outcome in
            state.outstandingPings = 0
            switch state.phase {
            case .handshaking(let current, sentConnect: true) where current === channel:
                state.phase = .ready(channel)
                state.readySince = .now()
                let reconnected = state.everConnected
                if reconnected { state.statistics.reconnects += 1 }
                state.everConnected = true
                let waiters = state.connectionWaiters
                let pings = state.deferredPings
                state.connectionWaiters = []
                state.deferredPings = []
                let observers = reconnected ? Array(state.lifecycleObservers.values) : []
                return .handshakeDone(waiters, pings, state.currentServer, reconnected: observers)
            case .ready(let current) where current === channel:
                return state.pingWaiters.isEmpty ? .ignored : .answered(state.pingWaiters.removeFirst())
            default:
                return .ignored
            }
        }
        switch outcome {
        case .handshakeDone(let waiters, let pings, let server, let observers):
            if let server {
                logger.info("NATS: connected to \(server)")
                eventContinuation.yield(.connected(server))
            }
            // What waited in the outbox goes first: once a waiter hears "connected", its next publish finds room.
            flushNow()
            startKeepAlive(on: channel)
            pings.forEach { sendPing(answering: $0) }
            waiters.forEach { $0.succeed() }
            observers.forEach { $0(.reconnected) }
        case .answered(let promise):
            promise?.succeed()
        case .ignored:
            break
        }
    }

    /// Sends a `PING` whose `PONG` completes `promise` (nil: a keep-alive).
    func sendPing(answering promise: EventLoopPromise<Void>?) {
        eventLoop.preconditionInEventLoop()
        enum Next { case closed, deferred, send(any Channel) }
        let next = state.withLockedValue { state -> Next in
            if case .closed = state.phase { return .closed }
            guard case .ready(let channel) = state.phase else {
                if let promise { state.deferredPings.append(promise) }
                return .deferred
            }
            state.pingWaiters.append(promise)
            if promise == nil { state.outstandingPings += 1 }
            return .send(channel)
        }
        // Promises are completed outside the lock: their callbacks may call back into the client.
        guard case .send(let channel) = next else {
            if case .closed = next { promise?.fail(NATSClientError.closed) }
            return
        }
        // Everything queued before this ping goes out first, so its PONG means the server saw it all.
        flushNow()
        var buffer = channel.allocator.buffer(capacity: 6)
        NATSClientOperation.writePing(to: &buffer)
        channel.writeAndFlush(buffer, promise: nil)
    }

    private func startKeepAlive(on channel: any Channel) {
        let interval = configuration.pingInterval
        eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { task in
            let status = self.state.withLockedValue { state -> (alive: Bool, stalled: Bool) in
                guard case .ready(let current) = state.phase, current === channel else { return (false, false) }
                return (true, state.outstandingPings >= 2)
            }
            if !status.alive {
                task.cancel()
            } else if status.stalled {
                self.logger.warning("NATS: server stopped answering pings; reconnecting")
                channel.close(promise: nil)
            } else {
                self.sendPing(answering: nil)
            }
        }
    }

    /// Asks the event loop to hand the outbox to the connection, once however many publishes ask.
    func scheduleFlush() {
        let schedule = state.withLockedValue { state -> Bool in
            guard !state.flushScheduled, state.phase.isReady else { return false }
            state.flushScheduled = true
            return true
        }
        if schedule { eventLoop.execute { self.flushNow() } }
    }

    /// Writes the control operations and the outbox to a ready, writable connection.
    func flushNow() {
        eventLoop.preconditionInEventLoop()
        let batch = state.withLockedValue { state -> (any Channel, ByteBuffer, Int)? in
            state.flushScheduled = false
            guard case .ready(let channel) = state.phase, channel.isWritable else { return nil }
            guard state.control.readableBytes > 0 || state.outboxMessages > 0 else { return nil }
            var buffer = state.control
            buffer.writeBuffer(&state.outbox)
            let count = state.outboxMessages
            state.control.clear()
            state.outbox.clear()
            state.outboxMessages = 0
            state.statistics.published += UInt64(count)
            return (channel, buffer, count)
        }
        guard let (channel, buffer, count) = batch else { return }
        let promise = eventLoop.makePromise(of: Void.self)
        promise.futureResult.whenFailure { _ in
            self.state.withLockedValue { $0.statistics.lostInFlight += UInt64(count) }
        }
        channel.writeAndFlush(buffer, promise: promise)
    }

    /// The connection `channel` ended: reconnect unless closed.
    func connectionLost(_ channel: any Channel, reason: String) {
        let delay = state.withLockedValue { state -> TimeAmount? in
            guard state.phase.channel === channel else { return nil }
            let wasReady = state.phase.isReady
            // A connection that served a while resets the backoff; one that a server drops at once (an
            // authorization it revokes, a server restarting in a loop) counts as a failed attempt.
            let lasted = state.readySince.map { NIODeadline.now() - $0 >= .seconds(1) } ?? false
            state.readySince = nil
            state.phase = .idle
            state.control.clear()
            state.outstandingPings = 0
            state.flushScheduled = false
            state.deferredPings.append(contentsOf: state.pingWaiters.compactMap { $0 })
            state.pingWaiters = []
            if wasReady && lasted {
                state.failedAttempts = 0
                return configuration.reconnectInitialDelay
            }
            state.failedAttempts += 1
            return backoff(failures: state.failedAttempts)
        }
        guard let delay else { return }
        logger.warning("NATS: connection lost: \(reason)")
        eventContinuation.yield(.disconnected(reason))
        eventLoop.scheduleTask(in: delay) { self.connectNext() }
    }

    func shutDown(completing promise: EventLoopPromise<Void>) {
        let (channel, waiters, requests, observers) = state.withLockedValue { state in
            let channel = state.phase.channel
            state.phase = .closed
            let waiters = state.connectionWaiters + state.deferredPings + state.pingWaiters.compactMap { $0 }
            state.connectionWaiters = []
            state.deferredPings = []
            state.pingWaiters = []
            state.outbox.clear()
            state.outboxMessages = 0
            let requests = Array(state.pendingRequests.values)
            state.pendingRequests = [:]
            let observers = Array(state.lifecycleObservers.values)
            state.lifecycleObservers = [:]
            return (channel, waiters, requests, observers)
        }
        waiters.forEach { $0.fail(NATSClientError.closed) }
        requests.forEach { $0.fail(NATSClientError.closed) }
        observers.forEach { $0(.closed) }
        guard let channel else { return promise.succeed() }
        channel.close().whenComplete { _ in promise.succeed() }
    }
}

/// Hands the server's operations and the connection's end to the client.
final class NATSConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = NATSServerOperation

    private let client: NATSClient
    private var reason = "closed by the server"

    init(client: NATSClient) { self.client = client }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let operation = unwrapInboundIn(data)
        if case .error(let text) = operation { reason = "server error: \(text)" }
        client.handle(operation, on: context.channel)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { client.scheduleFlush() }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        reason = "\(error)"
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        client.connectionLost(context.channel, reason: reason)
        context.fireChannelInactive()
    }
}
