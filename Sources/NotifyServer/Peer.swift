import Logging
import NIOCore
import NotifyWire

/// What a ``Peer`` needs from its connection: the channel handler implements it, so the peer never touches NIO.
protocol PeerTransport: AnyObject {
    /// Writes `bytes`, to be sent at the next ``flush()``.
    func write(_ bytes: ByteBuffer)
    /// Sends what was written.
    func flush()
    /// Calls `body` once everything written so far has been written to the socket or discarded.
    func whenWritten(_ body: @escaping () -> Void)
    /// Replies are piling up unread: stop reading requests.
    func stopReadingForBackPressure()
    /// Replies were drained: read requests again (the handler decides when).
    func backPressureRelieved()
    /// Whether the connection is inside its own read completion, or serving a frame from the bytes it borrows from
    /// its accumulator, where it must not be written to (the peer's flush then waits for ``flushWhenWritable(_:)``).
    var mustNotBeWrittenNow: Bool { get }
    /// Runs `flush` once the connection may be written to again: at the next tick of the event loop after a read
    /// completion, or as soon as a frame served in place is served (once, however often it is asked before).
    func flushWhenWritable(_ flush: @escaping () -> Void)
    /// Closes the connection at the next tick, discarding anything not yet written.
    func close()
}

/// One connected client as the daemon's protocol sees it: its identity, its handshake and lifecycle, its
/// subscriptions, and the queue of what it is sent. The broker offers it notifications; its requests come
/// from its channel handler (`Peer+Requests.swift`).
final class Peer {
    enum Phase {
        /// Waiting for `HELLO`.
        case awaitingHello
        /// Handshake done; requests are served.
        case open
        /// A fatal error was sent or the server is shutting down: input is ignored, the channel is closing.
        case closing
        case closed
    }

    let broker: Broker
    /// The connection's number in accept order.
    private(set) var number: UInt64 = 0
    /// The peer's index in the broker's per-peer tables.
    private(set) var slot = 0
    /// Not retained: the handler owns the peer, and outlives it as an open peer (the channel closes the peer
    /// before it releases the handler, and a closed peer never uses its transport).
    private unowned(unsafe) let transport: PeerTransport
    /// The channel handler serving this peer (for a graceful shutdown).
    var handler: PeerChannelHandler? { isClosed ? nil : transport as? PeerChannelHandler }
    private var isClosed: Bool { phase == .closed }
    private(set) var phase = Phase.awaitingHello
    /// Its record went to a successor, which now holds its subscriptions and charges (``handoverRecord``).
    var isHandedOver = false
    var queue: DeliveryQueue
    var subscriptions = SubscriptionTable()
    /// Its subscriptions with the states flag, listed in the broker's ``Broker/stateWatchers``; their ids are unique
    /// together with ``subscriptions``'.
    var stateSubscriptions = SubscriptionTable()
    let account: UserAccount
    /// Its log events carry its number, credentials and client name. Made at its first event: most connections
    /// log nothing, and the stream handler formats its metadata anew on each change.
    var logger: Logger {
        if let describedLogger { return describedLogger }
        var logger = broker.logger
        var metadata = logger.handler.metadata
        metadata["connection"] = "\(number)"
        metadata["pid"] = "\(credentials.pid)"
        metadata["uid"] = "\(credentials.uid)"
        if saidHello { metadata["client"] = "\(clientName)" }
        logger.handler.metadata = metadata
        describedLogger = logger
        return logger
    }
    private var describedLogger: Logger?
    /// Whether `HELLO` came (its client name, maybe empty, is then in the log metadata).
    private var saidHello = false

    /// Logs an event every connection has (opened, taken over, closed) if `level` is on: only then is the logger made.
    private func log(_ level: Logger.Level, _ message: Logger.Message, metadata: @autoclosure () -> Logger.Metadata? = nil) {
        guard broker.logger.logLevel <= level else { return }
        logger.log(level: level, message, metadata: metadata())
    }

    /// The peer's credentials from `SO_PEERCRED`, stamped on every notification it posts.
    let credentials: SenderCredentials
    /// Its uid and groups for access decisions; the groups are complete once ``identityFound(groups:)`` ran.
    private(set) var identity: AccessControl.Identity
    /// The command name, read at the first tick after the connection opened (`nil`: unknown yet, or hidden by the
    /// sandbox).
    var command: String?
    private(set) var clientName = ""
    /// The `HELLO` flags: whether it takes the origin of relayed posts (``HelloFlags/origins``).
    private(set) var helloFlags: UInt32 = 0
    /// Whether relayed posts reach it with their origin field (it asked in `HELLO`).
    var acceptsOrigins: Bool { helloFlags & HelloFlags.origins != 0 }
    /// Whether its own posts are kept from it (it asked in `HELLO`).
    var excludesOwnPosts: Bool { helloFlags & HelloFlags.noEcho != 0 }
    /// Replies exceed the queue's bound: its requests are not read until they drain.
    private(set) var isBackPressured = false
    /// The most full-path frames served in one turn so far (for tests: the bound holds).
    var mostFramesInOneTurn = 0

    /// Registers a new peer with `broker` and charges its connection to its user; a peer whose user has the
    /// most connections allowed is refused (an error is sent and it closes).
    init(broker: Broker, credentials: SenderCredentials, transport: PeerTransport) {
        self.broker = broker
        self.credentials = credentials
        self.transport = transport
        self.identity = AccessControl.Identity(uid: credentials.uid, groups: [credentials.gid])
        self.account = broker.accounts.account(for: credentials.uid)
        self.queue = DeliveryQueue(limit: broker.configuration.outboundByteLimit, account: account)
        (number, slot) = broker.register(self)
        log(.debug, "connection opened")
        if let denial = account.chargeConnection() {
            logger.warning(
                "connection refused: per-user connection quota reached",
                metadata: ["quota": "\(broker.accounts.quotas.connectionsPerUID)"])
            broker.statistics.countRefusal(.quotaExceeded)
            failClosing(.quotaExceeded, denial)
            broker.flushDirtyPeers()
        }
    }

    /// Takes over a connection a predecessor daemon handed over (``HandoverSnapshot``): its number, identity,
    /// handshake, subscriptions and queue as they were, charged to its user again without checking quotas (they
    /// were checked when it was first charged), and no `WELCOME`: the client notices nothing.
    init(broker: Broker, restoring record: HandoverSnapshot.PeerRecord, transport: PeerTransport) {
        self.broker = broker
        self.credentials = record.credentials
        self.transport = transport
        self.identity = AccessControl.Identity(uid: record.credentials.uid, groups: Set(record.groups))
        self.account = broker.accounts.account(for: record.credentials.uid)
        self.queue = DeliveryQueue(limit: broker.configuration.outboundByteLimit, account: account)
        self.command = record.command
        (number, slot) = broker.register(self, restoredNumber: record.number)
        account.chargeRestored(connections: 1)
        switch record.phase {
        case .awaitingHello: phase = .awaitingHello
        case .open, .closing: opened(clientName: record.clientName, flags: record.helloFlags)
        }
        for subscription in record.subscriptions {
            // The snapshot's decoder checked every pattern against the grammar; one without `*` or `>` anywhere
            // is an exact name, which need not be parsed again.
            let watchesStates = subscription.watchesStates
            let entry: SubscriptionTable.Subscription
            if NotificationPattern.mayHaveWildcards(subscription.pattern) {
                guard let pattern = try? NotificationPattern(subscription.pattern) else { continue }
                entry = SubscriptionTable.Subscription(pattern, subscription.policy)
            } else {
                entry = .exact(subscription.pattern, subscription.policy)
            }
            let labels = (watchesStates ? stateSubscriptions : subscriptions).patternLabels(adding: entry)
            account.chargeRestored(subscriptions: 1, patternLabels: labels)
            if watchesStates {
                stateSubscriptions.add(subscription.id, entry, peer: self, index: broker.stateWatchers)
            } else {
                subscriptions.add(
                    subscription.id, entry, marksRetained: subscription.marksRetained, peer: self, index: broker.index)
            }
        }
        queue.restore(
            suspendCount: Int(record.suspendCount), merged: record.merged, dropped: record.dropped,
            owed: record.outbound, held: record.held)
        if queue.heldBytes > 0 { broker.startedHolding(self) }
        if record.phase == .closing { closeAfterFlushing() }
        if queue.hasUnflushedBytes { broker.markDirty(self) }
        log(.debug, "connection taken over", metadata: ["subscriptions": "\(subscriptionCount)"])
    }

    var isOpen: Bool { phase == .open }
    /// Whether its frames are still read and served.
    var isServing: Bool { phase == .awaitingHello || phase == .open }
    /// Its subscriptions, to notifications and to state values.
    var subscriptionCount: Int { subscriptions.count + stateSubscriptions.count }

    /// Serves requests again, whatever is pending, until replies exceed the bound once more (a graceful shutdown
    /// or a hand-over serves what was read; a reply over the bound stops it again, so replies stay bounded).
    func ignoreBackPressure() { isBackPressured = false }

    /// The peer's groups are known: access decisions can be made.
    func identityFound(groups: Set<UInt32>) {
        identity = AccessControl.Identity(uid: credentials.uid, groups: groups)
    }

    /// The handshake: `HELLO` accepted with this client name and these flags.
    func opened(clientName name: String, flags: UInt32) {
        phase = .open
        clientName = name
        helloFlags = flags
        saidHello = true
        describedLogger?[metadataKey: "client"] = "\(clientName)"
    }

    // MARK: Output

    /// Queues a reply, and stops reading requests while replies exceed the bound.
    func reply(_ frame: ServerFrame) {
        // A write that failed while this peer's request was being served may have closed it already.
        guard phase != .closed else { return }
        let overBound = queue.append(frame)
        broker.markDirty(self)
        if overBound, !isBackPressured {
            // The client sends requests faster than it reads their replies: stop reading its requests until it
            // catches up, so its replies cannot grow without bound either.
            isBackPressured = true
            transport.stopReadingForBackPressure()
        }
    }

    func reject(_ requestID: UInt32, _ code: ErrorCode, _ message: String) {
        broker.statistics.countRefusal(code)
        logger.debug("request rejected", metadata: ["code": "\(code)", "reason": "\(message)"])
        reply(.error(ErrorFrame(requestID: requestID, code: code, message: message)))
    }

    /// Sends a fatal error and closes this connection once it is written; nothing else is read from it.
    func fail(_ code: ErrorCode, _ message: String) {
        guard isServing else { return }
        broker.statistics.protocolErrors += 1
        logger.notice("protocol error, closing connection", metadata: ["code": "\(code)", "reason": "\(message)"])
        failClosing(code, message)
    }

    private func failClosing(_ code: ErrorCode, _ message: String) {
        _ = queue.append(
            .error(ErrorFrame(requestID: ProtocolConstants.noRequest, rawCode: code.rawValue, closesConnection: true, message: message)))
        closeAfterFlushing()
    }

    /// Stops serving and closes once everything queued has been written.
    func closeAfterFlushing() {
        guard phase != .closed else { return }
        phase = .closing
        broker.markDirty(self)
    }

    /// The broker started holding notifications for this peer.
    func noteHolding() {
        logger.info(
            queue.isSuspended ? "holding notifications while suspended" : "client reads too slowly, holding notifications",
            metadata: ["pending": "\(queue.pendingBytes)"])
    }

    /// Closes with `ERROR slow-consumer`: a `disconnect` subscription's notification found the peer too slow.
    func disconnectSlowConsumer(subscriptionID: UInt32) {
        let pattern = subscriptions[subscriptionID]?.text ?? "?"
        logger.warning(
            "disconnecting slow consumer", metadata: ["subscription": "\(subscriptionID)", "pattern": "\(pattern)"])
        closeAsSlowConsumer(
            "the client did not read its notifications fast enough (over \(queue.limit) bytes pending) "
                + "and subscription \(subscriptionID) ('\(pattern)') asked to be disconnected")
    }

    /// Discards what is unflushed and held, queues `ERROR slow-consumer` with `message` and closes once it is
    /// written. A client that stops reading before that keeps its connection, and the bytes still owed to it stay
    /// charged to its user, until it reads that far or goes away: however late it resumes, it learns why it lost
    /// its notifications (closed after a timer instead, a stopped client got a bare end of file).
    func closeAsSlowConsumer(_ message: String) {
        queue.discard()
        broker.stoppedHolding(self)
        _ = queue.append(
            .error(ErrorFrame(requestID: ProtocolConstants.noRequest, code: .slowConsumer, message: message)))
        closeAfterFlushing()
    }

    /// Writes and flushes everything queued since the last flush (the broker calls it once per read burst).
    func flush() {
        guard phase != .closed else { return }
        if transport.mustNotBeWrittenNow {
            transport.flushWhenWritable { [self] in
                // Checked again: a closed peer's slot may be another peer's by then.
                if phase != .closed { broker.flush(self) }
            }
            return
        }
        if queue.hasUnflushedBytes {
            var handOver = queue.handOver { transport.write($0) }
            let count = handOver.count
            // A failed write can make NIO read this channel inside the flush, and what it reads flush this peer
            // again: that hand-over is its own, settled before this one.
            transport.flush()
            // Most writes finish inside this call, so they are written without a promise: if the channel no
            // longer holds the last of them afterwards, they were written (and the batch's storage takes the next
            // one). Only a write the channel could not finish gets a completion, after everything before it.
            if queue.settleHandOver(&handOver) {
                writeCompleted(count)
            } else {
                transport.whenWritten { [self] in writeCompleted(count) }
            }
        }
        if phase == .closing, queue.pendingBytes == 0 {
            closed()
            transport.close()
        }
    }

    private func writeCompleted(_ count: Int) {
        queue.completeWrite(count)
        guard phase != .closed else { return }
        broker.releaseHeld(self)
        if isBackPressured, queue.pendingBytes <= queue.limit / 2 {
            isBackPressured = false
            transport.backPressureRelieved()
        }
        if phase == .closing, queue.pendingBytes == 0 { flush() }
    }

    /// The connection is gone (or about to be): gives back everything charged and leaves the broker.
    func closed() {
        guard phase != .closed else { return }
        phase = .closed
        // The successor serves it on: this process, about to exit, leaves its tables as they are rather than
        // take each subscription out of them (the larger part of a hand-over's capture). The index and the peers
        // then keep each other, and the broker, until the process exits.
        if isHandedOver {
            broker.unregister(self)
            return
        }
        broker.statistics.connectionsClosed += 1
        let released = subscriptions.removeAll(peer: self, from: broker.index)
        account.releaseSubscriptions(released.subscriptions, patternLabels: released.patternLabels)
        let watches = stateSubscriptions.removeAll(peer: self, from: broker.stateWatchers)
        account.releaseSubscriptions(watches.subscriptions, patternLabels: watches.patternLabels)
        account.releaseConnection()
        queue.close()
        broker.unregister(self)
        // Routine closes are debug; a client that lost notifications is worth an operator's attention.
        log(
            queue.dropped > 0 ? .notice : .debug, "connection closed",
            metadata: queue.dropped + queue.merged > 0 ? ["dropped": "\(queue.dropped)", "merged": "\(queue.merged)"] : nil)
    }

    // MARK: Shutdown

    /// Starts a graceful close for daemon shutdown: everything already queued and held is written, then a
    /// `GOODBYE` frame tells the client to reconnect calmly, after a delay spread over
    /// ``goodbyeReconnectDelays`` so that the clients of a restarting daemon do not all come back at once.
    func beginShutdown() {
        guard isServing else { return }
        // What is held for a slow or suspended client is bounded already: send it too, in order, so nothing
        // posted before the shutdown is lost without a word.
        if queue.releaseAllHeld() { broker.stoppedHolding(self) }
        _ = queue.append(
            .goodbye(
                GoodbyeFrame(
                    reconnectAfterMilliseconds: UInt32.random(in: Self.goodbyeReconnectDelays),
                    reason: "notifyd is shutting down")))
        closeAfterFlushing()
    }

    /// The range of `GOODBYE.reconnect_after_ms` values, in milliseconds (PROTOCOL.md § 7).
    static let goodbyeReconnectDelays: ClosedRange<UInt32> = 250...1_000

    /// Closes at once, discarding what is queued (when the shutdown deadline passed).
    func forceClose() {
        guard phase != .closed else { return }
        transport.close()
    }

    // MARK: Introspection

    func introspection(now: NIODeadline) -> DaemonClient {
        let lag = queue.lag(now: now)
        return DaemonClient(
            connection: number, pid: credentials.pid, uid: credentials.uid, gid: credentials.gid,
            command: command, clientName: clientName, subscriptions: subscriptionCount,
            pendingBytes: queue.pendingBytes, heldBytes: queue.heldBytes, suspended: queue.isSuspended,
            merged: queue.merged, dropped: queue.dropped, lagNotifications: lag.notifications, lagBytes: lag.bytes,
            lagOldestSeconds: lag.oldestSeconds)
    }
}
