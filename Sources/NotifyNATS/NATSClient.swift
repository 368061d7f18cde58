import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A NATS core client on SwiftNIO: publish (with headers), subscribe, and stay connected.
///
/// The client connects in the background to the first server of its pool that answers, and goes on reconnecting
/// with backoff (through the configured servers and those the cluster announces in `INFO connect_urls`) whenever
/// the connection is lost; every live subscription is sent again on each new connection. Publishing never blocks
/// and never waits for a connection: messages wait in a bounded outbox, and what does not fit is dropped and
/// counted (``Statistics/dropped``). Subscription handlers run on the client's I/O thread, one at a time, in the
/// order the server delivered.
package final class NATSClient: Sendable {
    /// How the client connects.
    package struct Configuration: Sendable {
        /// The servers to try, in order. Credentials in the first URL that has any are used for every server.
        package var servers: [NATSServerAddress]
        /// The client name the server shows in its monitoring.
        package var name: String
        /// Whether the server sends this client its own messages back (NATS's `echo`).
        package var echo: Bool
        /// How many bytes of unsent messages to keep while the server is unreachable or slow.
        package var maxPendingBytes: Int
        /// The first reconnection delay, doubled after each round of failed attempts.
        package var reconnectInitialDelay: TimeAmount
        /// The longest reconnection delay.
        package var reconnectMaxDelay: TimeAmount
        /// How long one TCP connection attempt may take.
        package var connectTimeout: TimeAmount
        /// How often the client pings an idle server; two pings without an answer close the connection.
        package var pingInterval: TimeAmount

        /// Creates a configuration for the given servers.
        package init(
            servers: [NATSServerAddress], name: String = "notifyd", echo: Bool = true,
            maxPendingBytes: Int = 8 << 20, reconnectInitialDelay: TimeAmount = .milliseconds(50),
            reconnectMaxDelay: TimeAmount = .seconds(2), connectTimeout: TimeAmount = .seconds(2),
            pingInterval: TimeAmount = .seconds(20)
        ) {
            self.servers = servers
            self.name = name
            self.echo = echo
            self.maxPendingBytes = maxPendingBytes
            self.reconnectInitialDelay = reconnectInitialDelay
            self.reconnectMaxDelay = reconnectMaxDelay
            self.connectTimeout = connectTimeout
            self.pingInterval = pingInterval
        }
    }

    /// Counters since the client was created.
    package struct Statistics: Sendable, Equatable {
        /// Messages handed to a connection.
        package var published: UInt64 = 0
        /// Messages dropped because the outbox was full.
        package var dropped: UInt64 = 0
        /// Messages handed to a connection that closed before writing them.
        package var lostInFlight: UInt64 = 0
        /// Messages received on subscriptions.
        package var received: UInt64 = 0
        /// Connections established after the first.
        package var reconnects: UInt64 = 0
        /// Connection attempts that failed.
        package var connectFailures: UInt64 = 0
        /// `-ERR` lines from servers.
        package var serverErrors: UInt64 = 0
    }

    /// Something that happened to the client's connection.
    package enum Event: Sendable, Equatable {
        /// Connected (or reconnected) to the server, subscriptions sent again.
        case connected(NATSServerAddress)
        /// The connection ended; the client reconnects.
        case disconnected(String)
        /// A server reported an error.
        case serverError(String)
    }

    /// A subscription; cancel it to unsubscribe.
    package struct Subscription: Sendable, Hashable {
        /// Its subscription id on every connection.
        package let sid: UInt64
        /// The subject (possibly with wildcards) subscribed to.
        package let subject: String
    }

    let eventLoop: any EventLoop
    let ownedGroup: MultiThreadedEventLoopGroup?
    let configuration: Configuration
    let logger: Logger
    let state: NIOLockedValueBox<ClientState>
    let eventContinuation: AsyncStream<Event>.Continuation
    /// Events as they happen (connections, disconnections, server errors); one consumer.
    package let events: AsyncStream<Event>

    /// Creates a client and starts connecting in the background.
    ///
    /// - Parameters:
    ///   - configuration: the servers and limits.
    ///   - eventLoopGroup: where to run; nil creates a one-thread group the client owns.
    ///   - logger: where connection changes are logged.
    package init(configuration: Configuration, eventLoopGroup: (any EventLoopGroup)? = nil, logger: Logger? = nil) {
        precondition(!configuration.servers.isEmpty, "a NATS client needs at least one server")
        if let eventLoopGroup {
            ownedGroup = nil
            eventLoop = eventLoopGroup.next()
        } else {
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            ownedGroup = group
            eventLoop = group.next()
        }
        self.configuration = configuration
        self.logger = logger ?? Logger(label: "notifyd.nats")
        state = NIOLockedValueBox(ClientState(configuration: configuration))
        (events, eventContinuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(256))
        eventLoop.execute { self.connectNext() }
    }

    /// The counters so far.
    package var statistics: Statistics { state.withLockedValue { $0.statistics } }

    /// The server's largest payload (headers included), once connected; 1 MiB before.
    package var maxPayload: Int { state.withLockedValue { $0.maxPayload } }

    /// Whether the client is connected and has sent its subscriptions.
    package var isConnected: Bool { state.withLockedValue { $0.phase.isReady } }

    /// Publishes `payload` (with `headers`, if any) to `subject`.
    ///
    /// Returns at once: the message is written when the connection can take it. While the outbox holds
    /// ``Configuration/maxPendingBytes`` the message is dropped and counted instead.
    ///
    /// - Returns: false when the message was dropped.
    /// - Throws: ``NATSClientError/invalidSubject(_:)``, ``NATSClientError/payloadTooLarge(size:limit:)``,
    ///   ``NATSClientError/closed``.
    @discardableResult
    package func publish(
        _ subject: String, payload: ByteBuffer, headers: NATSHeaders? = nil, replyTo: String? = nil
    ) throws(NATSClientError) -> Bool {
        guard NATSSubject.isValidPublishSubject(subject) else { throw .invalidSubject(subject) }
        if let replyTo, !NATSSubject.isValidPublishSubject(replyTo) { throw .invalidSubject(replyTo) }
        let outcome = state.withLockedValue { state -> Result<Bool, NATSClientError> in
            state.enqueuePublish(subject: subject, replyTo: replyTo, headers: headers, payload: payload)
        }
        switch outcome {
        case .failure(let error): throw error
        case .success(let accepted):
            scheduleFlush()
            return accepted
        }
    }

    /// Subscribes to `subject` (wildcards allowed), optionally in a queue group; `handler` gets each message on the
    /// client's I/O thread.
    ///
    /// - Throws: ``NATSClientError/invalidSubject(_:)`` or ``NATSClientError/closed``.
    package func subscribe(
        _ subject: String, queueGroup: String? = nil, handler: @escaping @Sendable (NATSMessage) -> Void
    ) throws(NATSClientError) -> Subscription {
        guard NATSSubject.isValidSubscribeSubject(subject) else { throw .invalidSubject(subject) }
        if let queueGroup, queueGroup.isEmpty || !NATSSubject.isValidPublishSubject(queueGroup) {
            throw .invalidSubject(queueGroup)
        }
        let result = state.withLockedValue { $0.addSubscription(subject: subject, queueGroup: queueGroup, handler: handler) }
        let subscription = try result.get()
        scheduleFlush()
        return subscription
    }

    /// Ends a subscription; no handler call for it starts after the server has seen the `UNSUB`.
    package func unsubscribe(_ subscription: Subscription) {
        state.withLockedValue { $0.removeSubscription(sid: subscription.sid) }
        scheduleFlush()
    }

    /// Waits until the server has processed everything sent so far (a `PING` answered by `PONG`).
    ///
    /// - Throws: ``NATSClientError/timedOut(_:)`` when no answer comes within `timeout`, or
    ///   ``NATSClientError/closed``.
    package func flush(timeout: TimeAmount = .seconds(5)) async throws {
        guard state.withLockedValue({ beginOperation(&$0) }) else { throw NATSClientError.closed }
        defer { endOperation() }
        let promise = eventLoop.makePromise(of: Void.self)
        eventLoop.execute { self.sendPing(answering: promise) }
        let timer = eventLoop.scheduleTask(in: timeout) {
            self.state.withLockedValue { $0.forget(promise) }
            promise.fail(NATSClientError.timedOut("flush"))
        }
        defer { timer.cancel() }
        try await promise.futureResult.get()
    }

    /// Waits until the client is connected.
    ///
    /// - Throws: ``NATSClientError/timedOut(_:)`` or ``NATSClientError/closed``.
    package func waitUntilConnected(timeout: TimeAmount = .seconds(10)) async throws {
        let waiting = state.withLockedValue { state -> Result<EventLoopPromise<Void>?, NATSClientError> in
            if state.closeStarted { return .failure(.closed) }
            if state.phase.isReady { return .success(nil) }
            guard beginOperation(&state) else { return .failure(.closed) }
            let promise = eventLoop.makePromise(of: Void.self)
            state.connectionWaiters.append(promise)
            return .success(promise)
        }
        guard let promise = try waiting.get() else { return }
        defer { endOperation() }
        let timer = eventLoop.scheduleTask(in: timeout) {
            self.state.withLockedValue { $0.forget(promise) }
            promise.fail(NATSClientError.timedOut("no NATS server reachable"))
        }
        defer { timer.cancel() }
        try await promise.futureResult.get()
    }

    /// Closes the connection, stops reconnecting, and fails what waits. Unsent messages are discarded.
    package func close() async {
        let first = state.withLockedValue { state -> Bool in
            defer { state.closeStarted = true }
            return !state.closeStarted
        }
        guard first else { return }
        let promise = eventLoop.makePromise(of: Void.self)
        eventLoop.execute { self.shutDown(completing: promise) }
        try? await promise.futureResult.get()
        eventContinuation.finish()
        guard let ownedGroup else { return }
        // The calls still running end soon (their promises were failed), but may yet arm a timer on this thread.
        let drained = state.withLockedValue { state -> EventLoopPromise<Void>? in
            guard state.operationsInFlight > 0 else { return nil }
            state.operationsDrained = eventLoop.makePromise(of: Void.self)
            return state.operationsDrained
        }
        try? await drained?.futureResult.get()
        try? await ownedGroup.shutdownGracefully()
    }

    /// Counts a call that may arm a timer on the client's event loop, unless `close()` started; call it inside the
    /// state lock, and ``endOperation()`` when the call ends. `close()` stops an owned thread only after every such
    /// call ended: a timer armed on a stopped event loop is a promise never completed (a crash in debug builds).
    func beginOperation(_ state: inout ClientState) -> Bool {
        guard !state.closeStarted else { return false }
        state.operationsInFlight += 1
        return true
    }

    /// Ends a call counted by ``beginOperation(_:)``.
    func endOperation() {
        let drained = state.withLockedValue { state -> EventLoopPromise<Void>? in
            state.operationsInFlight -= 1
            guard state.operationsInFlight == 0 else { return nil }
            defer { state.operationsDrained = nil }
            return state.operationsDrained
        }
        drained?.succeed()
    }
}
