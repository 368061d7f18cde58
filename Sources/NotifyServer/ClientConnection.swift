#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import NIOCore
import NotifyWire

/// One client connection: decodes its frames, carries out its requests against the router, and owns its
/// bounded outbound queue and the notifications held for it. Runs on the server's event loop only.
final class ClientConnection: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        /// Waiting for `HELLO`.
        case awaitingHello
        /// Handshake done; requests are served.
        case open
        /// A fatal error was sent or the server is shutting down: input is ignored, the channel is closing.
        case closing
        case closed
    }

    /// One subscription. An exact name keeps only its text (a parsed pattern's label list would be most of
    /// the daemon's memory per subscription).
    private enum Subscription {
        case exact(String, DeliveryPolicy)
        case pattern(NotificationPattern, DeliveryPolicy)

        var text: String {
            switch self {
            case .exact(let name, _): name
            case .pattern(let pattern, _): pattern.text
            }
        }

        var policy: DeliveryPolicy {
            switch self {
            case .exact(_, let policy), .pattern(_, let policy): policy
            }
        }

        func matches(_ name: String) -> Bool {
            switch self {
            case .exact(let exact, _): ExactName(exact) == ExactName(name)
            case .pattern(let pattern, _): pattern.matches(name)
            }
        }
    }

    private let router: SubscriptionRouter
    private var context: ChannelHandlerContext?
    private var state = State.awaitingHello
    private var accumulator: FrameAccumulator<ClientFrame>
    private var outbound = OutboundQueue(allocator: ByteBufferAllocator())
    private var held: HeldNotifications? {
        didSet { if held == nil, !heldPolicies.isEmpty { heldPolicies = [:] } }
    }
    private var suspendCount = 0
    private var isDirty = false
    private var isReadingPaused = false
    private(set) var logger: Logger
    private let limit: Int
    /// Unflushed bytes past which a connection is flushed before the read burst ends.
    private let eagerFlushBytes: Int

    /// The peer's credentials from `SO_PEERCRED`, stamped on every notification it posts.
    private(set) var credentials = SenderCredentials(pid: 0, uid: UInt32.max, gid: UInt32.max)
    private(set) var peer = AccessControl.Peer(uid: UInt32.max, groups: [])
    /// The command name read when the connection opened (`nil`: unknown yet, or hidden by the sandbox).
    private var command: String?
    /// Set until the groups are known: nothing is served before, since an access decision needs them.
    private var awaitingIdentity = false
    /// Reading was switched off while the groups are looked up.
    private var readingPausedForIdentity = false
    /// The peer closed its side while frames were still to be served (``awaitingIdentity`` or
    /// ``servingDeferred``): handled once they have been.
    private var inputClosedPending = false
    /// Frames wait in the accumulator for the next turn of the event loop (see ``framesPerTurn``); reading is
    /// off meanwhile.
    private var servingDeferred = false
    /// Frames served through the full path, and posts continuing a run, in this turn of the event loop.
    private var turnFrames = 0
    private var turnRunPosts = 0
    private var turnPatternVisits = 0

    /// Starts a new turn's budget (see ``framesPerTurn``).
    private func startTurn() {
        turnFrames = 0
        turnRunPosts = 0
        turnPatternVisits = 0
    }
    /// The most full-path frames served in one turn so far (for tests: the bound holds).
    private(set) var mostFramesInOneTurn = 0
    private var account: UIDAccount?
    /// Bytes this connection has counted in its account (pending plus held).
    private var accountedBytes = 0
    private(set) var clientName = ""
    /// The connection's number in accept order.
    private(set) var number: UInt64 = 0
    /// The router's mark of the last post or run routed to this connection (to deliver each post once).
    var routeMark: UInt64 = 0
    /// The route of this connection's last run of posts, kept by the router for its next post.
    var parkedRoute: PostRun.ParkedRoute?
    /// Whether the router lists this connection among those holding a parked route.
    var isListedAsParked = false

    private var subscriptions: [UInt32: Subscription] = [:] {
        didSet { heldPolicies.removeAll() }
    }
    /// ``strongestPolicy(for:)`` per name while notifications are held: matching every subscription for each held
    /// notification made holding linear in the subscriptions. Emptied when the subscriptions change.
    private var heldPolicies: [String: (DeliveryPolicy, UInt32)] = [:]
    /// Exact name → number of this connection's subscriptions naming it beyond the first (the router lists
    /// the connection once per name); empty unless a client subscribes to one name twice.
    private var repeatedExactNames: [ExactName: Int] = [:]
    /// Pattern text → number of this connection's subscriptions using it.
    private var patternCounts: [ExactName: Int] = [:]
    private(set) var merged: UInt64 = 0
    private(set) var dropped: UInt64 = 0

    init(router: SubscriptionRouter) {
        self.router = router
        self.accumulator = FrameAccumulator(maxFrameLength: router.configuration.limits.maxFrameLength)
        self.logger = router.logger
        self.limit = router.configuration.outboundByteLimit
        self.eagerFlushBytes = min(64 * 1024, max(router.configuration.outboundByteLimit / 4, 4 * 1024))
    }

    var subscriptionCount: Int { subscriptions.count }
    var pendingOutboundBytes: Int { outbound.pendingBytes }
    var heldBytes: Int { held?.bytes ?? 0 }
    var isHolding: Bool { held != nil }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // The handler and its context hold each other: break the cycle, or every closed connection leaks.
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        number = router.register(self)
        if let peerCredentials = PeerCredentials.read(from: context.channel) {
            credentials = peerCredentials
        }
        peer = AccessControl.Peer(uid: credentials.uid, groups: [credentials.gid])
        awaitingIdentity = true
        router.identities.resolve(
            credentials, groupsFound: { [self] groups in groupsFound(groups) },
            commandFound: { [self] command in self.command = command })
        if awaitingIdentity {
            // Nothing is read until the groups are known: the socket's buffer holds what the client sends.
            readingPausedForIdentity = true
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
        let account = router.account(for: credentials.uid)
        account.connections += 1
        self.account = account
        logger[metadataKey: "connection"] = "\(number)"
        logger[metadataKey: "pid"] = "\(credentials.pid)"
        logger[metadataKey: "uid"] = "\(credentials.uid)"
        logger.debug("connection opened")
        let quota = router.quotas.connectionsPerUID
        if !account.isExempt, account.connections > quota {
            logger.warning("connection refused: per-user connection quota reached", metadata: ["quota": "\(quota)"])
            failClosing(.quotaExceeded, "uid \(credentials.uid) already has the maximum of \(quota) connections")
            router.flushDirtyConnections()
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        // A read loop that ends in an error or EOF gets no channelReadComplete: flush what this connection's
        // last reads queued for others.
        router.flushDirtyConnections()
        if state != .closed {
            state = .closed
            router.unregister(self)
            // Routine closes are debug; a client that lost notifications is worth an operator's attention.
            logger.log(
                level: dropped > 0 ? .notice : .debug, "connection closed",
                metadata: dropped + merged > 0 ? ["dropped": "\(dropped)", "merged": "\(merged)"] : nil)
        }
        context.fireChannelInactive()
    }

    /// The connection's groups are known: serve what arrived meanwhile, and read again.
    private func groupsFound(_ groups: Set<UInt32>) {
        awaitingIdentity = false
        peer = AccessControl.Peer(uid: credentials.uid, groups: groups)
        guard readingPausedForIdentity else { return }  // found at once: reading never paused
        readingPausedForIdentity = false
        guard state == .awaitingHello || state == .open else { return }
        serveBufferedFrames()
        if inputClosedPending, !servingDeferred { inputClosed() }
        router.flushDirtyConnections()
        resumeReadingIfAllowed()
    }

    /// Turns reading back on unless something still holds it off: back-pressure, the identity lookup, or
    /// frames deferred to the next turn.
    private func resumeReadingIfAllowed() {
        guard !isReadingPaused, !readingPausedForIdentity, !servingDeferred, let context,
            state == .awaitingHello || state == .open
        else { return }
        context.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state == .awaitingHello || state == .open else { return }
        accumulator.append(unwrapInboundIn(data))
        guard !awaitingIdentity, !servingDeferred else { return }
        serveBufferedFrames()
    }

    /// Full-path frames (requests, posts that start a run) one connection has served in one turn of the
    /// event loop; the rest waits for the next turn, after other connections' events: a client that pipelines
    /// thousands of subscriptions cannot hold the loop from everyone else.
    static let framesPerTurn = 256
    /// Posts continuing a run served in one turn (each costs about a copy of its bytes).
    static let runPostsPerTurn = 16_384
    /// Pattern trie nodes the frames of one connection may have matches visit in one turn: posts to names
    /// that many patterns could match cost more than others, and are counted by that cost.
    static let patternVisitsPerTurn = 65_536

    /// Decodes and serves the complete frames received so far, up to this turn's budget.
    private func serveBufferedFrames() {
        let maxPayload = Int(router.configuration.limits.maxPayloadLength)
        do throws(WireDecodingError) {
            while state == .awaitingHello || state == .open {
                // A client that does not read its replies gets no more served until it does (writeCompleted
                // serves the rest): its requests, a QUERY above all, cannot grow its queue without bound.
                if isReadingPaused { break }
                if turnFrames >= Self.framesPerTurn || turnRunPosts >= Self.runPostsPerTurn
                    || turnPatternVisits >= Self.patternVisitsPerTurn
                {
                    deferServing()
                    break
                }
                guard var frame = try accumulator.nextRawFrame() else { break }
                // A post that continues this connection's run of posts to one name needs no decoding or
                // checks beyond its size: the first post of the run passed them all (see PostRun).
                if frame.type == MessageType.post.rawValue,
                    router.appendToRun(ifContinuedBy: self, body: frame.body, maxPayload: maxPayload)
                {
                    turnRunPosts += 1
                    continue
                }
                router.endRun()
                turnFrames += 1
                mostFramesInOneTurn = max(mostFramesInOneTurn, turnFrames)
                let visitsBefore = router.patternNodesVisited
                handle(try ClientFrame.decode(type: frame.type, body: &frame.body))
                turnPatternVisits += router.patternNodesVisited &- visitsBefore
            }
        } catch {
            router.endRun()
            fail(error.code, error.description)
        }
        router.endRun()
    }

    /// Serves the frames left over at the next turn of the event loop, reading nothing new meanwhile.
    private func deferServing() {
        guard !servingDeferred, accumulator.bufferedBytes > 0, let context else { return }
        servingDeferred = true
        context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        context.eventLoop.assumeIsolated().execute { [self] in
            servingDeferred = false
            startTurn()
            guard state == .awaitingHello || state == .open else { return }
            serveBufferedFrames()
            if inputClosedPending, !servingDeferred { inputClosed() }
            router.flushDirtyConnections()
            resumeReadingIfAllowed()
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // The turn's budget starts again with the next read (frames deferred meanwhile are served first).
        if !servingDeferred { startTurn() }
        router.flushDirtyConnections()
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            if awaitingIdentity || servingDeferred {
                inputClosedPending = true
            } else {
                inputClosed()
                router.flushDirtyConnections()
            }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// The peer finished sending. A partial frame left behind is a protocol violation worth reporting;
    /// otherwise write whatever is still queued for it, then close.
    private func inputClosed() {
        do throws(WireDecodingError) {
            try accumulator.finish()
            closeAfterFlushing()
        } catch {
            fail(error.code, error.description)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        logger.debug("connection error", metadata: ["error": "\(error)"])
        router.flushDirtyConnections()
        context.close(promise: nil)
    }

    // MARK: Requests

    private func handle(_ frame: ClientFrame) {
        if case .hello(let hello) = frame {
            handleHello(hello)
            return
        }
        guard state == .open else {
            fail(.handshakeRequired, "the first frame must be HELLO, got \(frame.messageType)")
            return
        }
        switch frame {
        case .hello:
            break  // handled above
        case .subscribe(let subscribe):
            handleSubscribe(subscribe)
        case .unsubscribe(let requestID, let subscriptionID):
            handleUnsubscribe(requestID: requestID, subscriptionID: subscriptionID)
        case .post(let post):
            handlePost(post)
        case .ping(let requestID):
            reply(.pong(requestID: requestID))
        case .setState(let requestID, let name, let value):
            handleSetState(requestID: requestID, name: name, value: value)
        case .getState(let requestID, let name):
            handleGetState(requestID: requestID, name: name)
        case .suspend(let requestID):
            suspendCount += 1
            reply(.ok(requestID: requestID))
        case .resume(let requestID):
            handleResume(requestID: requestID)
        case .query(let requestID, let kind, let argument):
            switch router.query(kind: kind, argument: argument, requester: peer) {
            case .success(let parts):
                for part in parts.dropLast() { reply(.queryResultPart(requestID: requestID, json: part)) }
                reply(.queryResult(requestID: requestID, json: parts.last!))
            case .failure(let denial): reject(requestID, .invalidRequest, denial.message)
            }
        }
    }

    private func handleHello(_ hello: ClientFrame.Hello) {
        guard state == .awaitingHello else {
            fail(.unexpectedHello, "HELLO was already received on this connection")
            return
        }
        guard hello.version == ProtocolConstants.version else {
            fail(
                .unsupportedVersion,
                "protocol version \(hello.version) is not supported; this daemon speaks version \(ProtocolConstants.version)")
            return
        }
        state = .open
        // Every client's name is in root's `clients` answer and in the logs: a longer one is cut, not refused.
        clientName = hello.clientName.truncatedUTF8(maxBytes: ProtocolConstants.maxClientNameLength)
        logger[metadataKey: "client"] = "\(clientName)"
        reply(
            .welcome(
                ServerFrame.Welcome(
                    daemonPID: router.daemonPID, instanceID: router.instanceID, limits: router.configuration.limits,
                    serverName: router.configuration.serverName)))
    }

    private func handleSubscribe(_ subscribe: ClientFrame.Subscribe) {
        let requestID = subscribe.requestID
        let unknownFlags = subscribe.flags.subtracting(.known)
        guard unknownFlags.isEmpty else {
            reject(requestID, .unsupportedFlags, "SUBSCRIBE flags 0x\(String(unknownFlags.rawValue, radix: 16)) are not defined")
            return
        }
        guard let policy = subscribe.policy else {
            reject(
                requestID, .invalidRequest,
                "policy \(subscribe.policyCode) with queue limit \(subscribe.queueLimit) is not valid "
                    + "(0 coalesce and 2 disconnect take limit 0; 1 queue takes a limit of at least 1)")
            return
        }
        let pattern: NotificationPattern
        do {
            pattern = try NotificationPattern(subscribe.pattern, maxLength: Int(router.configuration.limits.maxNameLength))
        } catch {
            reject(requestID, .invalidName, error.description)
            return
        }
        if let problem = Self.processLocalProblem(pattern.text) {
            reject(requestID, .invalidName, problem)
            return
        }
        guard subscriptions[subscribe.subscriptionID] == nil else {
            reject(requestID, .duplicateSubscription, "subscription id \(subscribe.subscriptionID) is already in use on this connection")
            return
        }
        let limits = router.configuration.limits
        guard subscriptions.count < Int(limits.maxSubscriptions) else {
            reject(requestID, .tooManySubscriptions, "this connection already holds the maximum of \(limits.maxSubscriptions) subscriptions")
            return
        }
        let quota = router.quotas.subscriptionsPerUID
        if let account, !account.isExempt, account.subscriptions >= quota {
            reject(requestID, .quotaExceeded, "uid \(credentials.uid) already holds the maximum of \(quota) subscriptions")
            return
        }
        if let denial = router.access.checkObserve(pattern, by: peer) {
            logger.notice("subscription denied", metadata: ["name": "\(pattern.text)", "reason": "\(denial.message)"])
            reject(requestID, .permissionDenied, denial.message)
            return
        }
        // A pattern new to this connection adds its labels to the trie, which every post may walk: charged to
        // the user (the same pattern again on this connection adds nothing).
        let isNewPattern = pattern.hasWildcards && patternCounts[ExactName(pattern.text)] == nil
        let labels = isNewPattern ? PatternTrie.cost(of: pattern) : 0
        let labelQuota = router.quotas.patternLabelsPerUID
        if isNewPattern, let account, !account.isExempt, account.patternLabels + labels > labelQuota {
            reject(
                requestID, .quotaExceeded,
                "uid \(credentials.uid)'s patterns already hold \(account.patternLabels) labels and this one has \(labels); "
                    + "the maximum is \(labelQuota) (quota pattern-labels-per-uid)")
            return
        }
        account?.subscriptions += 1
        if pattern.hasWildcards {
            subscriptions[subscribe.subscriptionID] = .pattern(pattern, policy)
            let count = patternCounts[ExactName(pattern.text), default: 0]
            patternCounts[ExactName(pattern.text)] = count + 1
            if count == 0 {
                router.addPattern(pattern, for: self)
                account?.patternLabels += labels
            }
        } else {
            subscriptions[subscribe.subscriptionID] = .exact(pattern.text, policy)
            if !router.addSubscriber(self, to: pattern.text) {
                repeatedExactNames[ExactName(pattern.text), default: 0] += 1
            }
        }
        // Retained notifications first: the OK that follows tells the client the current values are complete.
        if subscribe.flags.contains(.sendRetained) {
            for notification in router.retainedNotifications(matching: pattern, for: peer) {
                outbound.append(.retained(requestID: requestID, notification))
            }
        }
        reply(.ok(requestID: requestID))
    }

    private func handleUnsubscribe(requestID: UInt32, subscriptionID: UInt32) {
        guard let subscription = subscriptions.removeValue(forKey: subscriptionID) else {
            reject(requestID, .unknownSubscription, "no subscription with id \(subscriptionID) on this connection")
            return
        }
        account?.subscriptions -= 1
        removeFromRouter(subscription)
        reply(.ok(requestID: requestID))
    }

    private func removeFromRouter(_ subscription: Subscription) {
        switch subscription {
        case .pattern(let pattern, _):
            let count = patternCounts[ExactName(pattern.text), default: 1] - 1
            patternCounts[ExactName(pattern.text)] = count == 0 ? nil : count
            if count == 0 {
                router.removePattern(pattern, for: self)
                account?.patternLabels -= PatternTrie.cost(of: pattern)
            }
        case .exact(let name, _):
            if let repeated = repeatedExactNames[ExactName(name)] {
                repeatedExactNames[ExactName(name)] = repeated == 1 ? nil : repeated - 1
            } else {
                router.removeSubscriber(self, from: name)
            }
        }
    }

    /// Removes every subscription from the router and returns this connection's share of its user's account
    /// (when the connection ends).
    func releaseSubscriptions() {
        for subscription in subscriptions.values { removeFromRouter(subscription) }
        account?.subscriptions -= subscriptions.count
        subscriptions.removeAll()
        held = nil
        account?.connections -= 1
        account?.outboundBytes -= accountedBytes
        accountedBytes = 0
        account = nil
    }

    private func handlePost(_ post: ClientFrame.Post) {
        let unknownFlags = post.flags.subtracting(.known)
        guard unknownFlags.isEmpty else {
            reject(post.requestID, .unsupportedFlags, "POST flags 0x\(String(unknownFlags.rawValue, radix: 16)) are not defined")
            return
        }
        // A name with exact subscribers passed the grammar when it was subscribed; others need checking. The
        // lookup is handed on to the router, so a post looks its name up once.
        let subscribers = router.exactSubscribers(of: post.name)
        if subscribers == nil, let problem = invalidNameReason(post.name) {
            reject(post.requestID, .invalidName, problem)
            return
        }
        let maxPayload = router.configuration.limits.maxPayloadLength
        guard post.payload.readableBytes <= Int(maxPayload) else {
            reject(
                post.requestID, .payloadTooLarge,
                "payload of \(post.payload.readableBytes) bytes exceeds the limit of \(maxPayload) bytes")
            return
        }
        if let denial = router.access.checkPost(post.name, by: peer, action: "post") {
            logger.notice("post denied", metadata: ["name": "\(post.name)", "reason": "\(denial.message)"])
            reject(post.requestID, .permissionDenied, denial.message)
            return
        }
        let retain = post.flags.contains(.retain)
        if retain, !router.mayRetain(post.payload.readableBytes, name: post.name, uid: credentials.uid) {
            let quota = router.quotas.retainedBytesPerUID
            reject(post.requestID, .quotaExceeded, "retaining this payload would exceed uid \(credentials.uid)'s quota of \(quota) retained bytes")
            return
        }
        if post.flags.isEmpty {
            router.postInRun(name: post.name, payload: post.payload, from: self, exactSubscribers: subscribers)
            return
        }
        let (sequence, delivered) = router.post(
            name: post.name, payload: post.payload, sender: credentials, retain: retain, exactSubscribers: subscribers)
        if post.flags.contains(.ackWanted) {
            reply(.posted(requestID: post.requestID, sequence: sequence, deliveredCount: delivered))
        }
    }

    private func handleSetState(requestID: UInt32, name: String, value: UInt64) {
        if let problem = invalidNameReason(name) {
            reject(requestID, .invalidName, problem)
            return
        }
        if let denial = router.access.checkPost(name, by: peer, action: "set the state of") {
            logger.notice("state change denied", metadata: ["name": "\(name)", "reason": "\(denial.message)"])
            reject(requestID, .permissionDenied, denial.message)
            return
        }
        guard router.setState(value, for: name, uid: credentials.uid) else {
            let quota = router.quotas.stateNamesPerUID
            reject(requestID, .quotaExceeded, "uid \(credentials.uid) already set the state of the maximum of \(quota) names")
            return
        }
        reply(.ok(requestID: requestID))
    }

    private func handleGetState(requestID: UInt32, name: String) {
        if let problem = invalidNameReason(name) {
            reject(requestID, .invalidName, problem)
            return
        }
        if let rule = router.access.rule(for: name), !router.access.mayObserve(rule, peer) {
            reject(
                requestID, .permissionDenied,
                "permission denied: you may not observe names under '\(rule.prefix)' (\(AccessControl.reference(to: rule)))")
            return
        }
        reply(.state(requestID: requestID, value: router.state(of: name)))
    }

    private func handleResume(requestID: UInt32) {
        guard suspendCount > 0 else {
            reject(requestID, .invalidRequest, "RESUME without a matching SUSPEND")
            return
        }
        suspendCount -= 1
        reply(.ok(requestID: requestID))
        if suspendCount == 0 { releaseHeldIfPossible() }
    }

    private func invalidNameReason(_ name: String) -> String? {
        do {
            try NotificationName.validate(name, maxLength: Int(router.configuration.limits.maxNameLength))
        } catch {
            return error.description
        }
        return Self.processLocalProblem(name)
    }

    /// Why a `self.` name or pattern is refused: such names belong to one process and never reach the daemon.
    private static func processLocalProblem(_ name: String) -> String? {
        guard NotificationName.isProcessLocal(name) else { return nil }
        return "invalid name '\(name)': names starting with 'self.' are process-local and never reach the daemon"
    }

    // MARK: Delivery

    /// Queues a notification frame shared by all recipients, or holds it under the matching subscription's
    /// policy when the connection cannot take it now.
    ///
    /// - Returns: `false` if the notification was not delivered (the connection is closing or was just
    ///   disconnected by the `disconnect` policy).
    /// - Parameter policy: the matching subscription's policy and id, when the caller already knows them.
    func deliver(
        _ frame: ByteBuffer, name: String, sequence: UInt64, policy: (DeliveryPolicy, UInt32)? = nil
    ) -> Bool {
        guard state == .open else { return false }
        if queueIfRoom(frame) { return true }
        return hold(frame, name: name, sequence: sequence, policy: policy ?? strongestPolicy(for: name))
    }

    /// Takes a run of posts to one name that ``queueIfRoom(_:)`` declined: holds it, or takes it one post at
    /// a time. (The router offers every recipient the run's bytes first; passing it the whole run copies the
    /// run.)
    ///
    /// - Returns: how many of the run's notifications were queued or held.
    func deliver(run: PostRun) -> Int {
        guard state == .open else { return 0 }
        // The policy is the same for every post of the run, so it is looked up once.
        let policy = strongestPolicy(for: run.name)
        if held != nil, policy.0 == .coalesce, let last = run.frames.last {
            // Everything goes to the held table, where each post would replace the one before: hold the last.
            let alsoMerged = UInt64(run.frames.count - 1)
            _ = hold(run.slice(last), name: run.name, sequence: last.sequence, policy: policy, alsoMerged: alsoMerged)
            return run.frames.count
        }
        if case .queue(let queueLimit) = policy.0, run.frames.count > 1 {
            // What fits now goes out now; the rest is held as one chunk: one copy of its bytes, not one
            // entry per post.
            var first = 0
            if held == nil, suspendCount == 0 {
                var room = min(limit - outbound.pendingBytes, quotaRoom)
                while first < run.frames.count, run.frames[first].length <= room {
                    room -= run.frames[first].length
                    first += 1
                }
                if first > 0 {
                    let start = run.frames[0].offset
                    let end = run.frames[first - 1].offset + run.frames[first - 1].length
                    _ = queueIfRoom(run.encoded.getSlice(at: start, length: end - start)!)
                    // Its eager flush may have failed and closed the connection (a peer gone): hold nothing then.
                    guard state == .open else { return first }
                }
            }
            if first < run.frames.count {
                startHolding()
                let owned = run.ownedFrames(from: first)
                let outcome = held!.holdRun(
                    owned, count: run.frames.count - first, firstSequence: run.frames[first].sequence,
                    limit: queueLimit, subscriptionID: policy.1)
                dropped += outcome
                router.statistics.dropped += outcome
                enforceHeldBound()
            }
            return run.frames.count
        }
        var delivered = 0
        for frame in run.frames {
            guard state == .open else { break }
            if deliver(run.slice(frame), name: run.name, sequence: frame.sequence, policy: policy) { delivered += 1 }
        }
        return delivered
    }

    /// Queues encoded notifications (one, or a whole run) in one append, if the connection can take them all
    /// now: it is open, holds nothing, is not suspended, and they fit its bound and its user's quota.
    ///
    /// - Returns: `false` if nothing was done (the caller then holds them or takes them one by one).
    func queueIfRoom(_ encoded: ByteBuffer) -> Bool {
        let size = encoded.readableBytes
        guard state == .open, held == nil, suspendCount == 0, outbound.pendingBytes + size <= limit,
            accountAllows(size)
        else { return false }
        outbound.append(encoded)
        accountedBytes += size
        account?.outboundBytes += size
        if outbound.buffer.readableBytes >= eagerFlushBytes {
            // One read burst can carry more posts than the bound holds: hand batches to the socket as the
            // burst goes, so a subscriber that keeps reading is not treated as slow.
            flushOutbound()
        } else {
            markDirty()
        }
        return true
    }

    private func accountAllows(_ size: Int) -> Bool {
        size <= quotaRoom
    }

    /// Bytes the user's quota still allows this connection to add.
    private var quotaRoom: Int {
        guard let account, !account.isExempt else { return .max }
        return router.quotas.outboundBytesPerUID - account.outboundBytes
    }

    private func hold(
        _ frame: ByteBuffer, name: String, sequence: UInt64, policy matching: (DeliveryPolicy, UInt32),
        alsoMerged: UInt64 = 0
    ) -> Bool {
        let (policy, subscriptionID) = matching
        // `disconnect` is for a client that cannot keep up, not for one that is only working through a
        // backlog it was allowed to build (after a resume, say): then the notification is held like the rest.
        let isSlow = outbound.pendingBytes + frame.readableBytes > limit || !accountAllows(frame.readableBytes)
        if suspendCount == 0, policy == .disconnect, isSlow {
            disconnectSlowConsumer(subscriptionID: subscriptionID)
            return false
        }
        startHolding()
        // A `disconnect` subscription that is not being disconnected (suspended, or working through a backlog) is
        // held like a bounded queue.
        let effective = policy == .disconnect ? DeliveryPolicy.queue(limit: 1_000) : policy
        let outcome = held!.hold(
            frame, name: name, sequence: sequence, policy: effective, subscriptionID: subscriptionID,
            alsoMerged: effective == .coalesce ? alsoMerged : 0)
        merged += outcome.merged
        dropped += outcome.dropped
        router.statistics.merged += outcome.merged
        router.statistics.dropped += outcome.dropped
        enforceHeldBound()
        return true
    }

    private func startHolding() {
        guard held == nil else { return }
        held = HeldNotifications()
        router.startedHolding(self)
        logger.info(
            suspendCount > 0 ? "holding notifications while suspended" : "client reads too slowly, holding notifications",
            metadata: ["pending": "\(outbound.pendingBytes)"])
    }

    /// Held bytes are bounded per connection and count towards the user's quota: evicts the oldest beyond.
    private func enforceHeldBound() {
        while true {
            var excess = held!.bytes - limit
            if let account, !account.isExempt {
                let unaccounted = held!.bytes + outbound.pendingBytes - accountedBytes
                excess = max(excess, account.outboundBytes + unaccounted - router.quotas.outboundBytesPerUID)
            }
            guard excess > 0 else { break }
            let lost = held!.evictOldest(bytes: excess)
            if lost == 0 { break }
            dropped += lost
            router.statistics.dropped += lost
        }
        syncAccount()
    }

    /// The policy of the most protective subscription matching `name`, and its id.
    private func strongestPolicy(for name: String) -> (DeliveryPolicy, UInt32) {
        if let known = heldPolicies[name] { return known }
        let policy = matchStrongestPolicy(for: name)
        // Bounded like the names a slow client could be sent; a rare refill costs one match per name.
        if heldPolicies.count >= 1_024 { heldPolicies.removeAll(keepingCapacity: true) }
        heldPolicies[name] = policy
        return policy
    }

    private func matchStrongestPolicy(for name: String) -> (DeliveryPolicy, UInt32) {
        var best: (policy: DeliveryPolicy, id: UInt32)?
        for (id, subscription) in subscriptions {
            // The strongest policy wins; between equals, the lowest subscription id, so the choice is stable.
            if subscription.matches(name),
                best == nil || subscription.policy.strength > best!.policy.strength
                    || (subscription.policy.strength == best!.policy.strength && id < best!.id)
            {
                best = (subscription.policy, id)
            }
        }
        return best.map { ($0.policy, $0.id) } ?? (.coalesce, 0)
    }

    /// Moves held notifications into the outbound queue once the connection has room and is not suspended.
    func releaseHeldIfPossible() {
        guard state == .open, held != nil, suspendCount == 0, outbound.pendingBytes <= limit / 2,
            accountAllows(0)
        else { return }
        held!.release(into: &outbound.buffer, budget: limit - outbound.pendingBytes)
        if held!.isEmpty {
            held = nil
            router.stoppedHolding(self)
            logger.info("caught up, no notifications held any more")
        }
        syncAccount()
        markDirty()
        flushOutbound()
    }

    private func disconnectSlowConsumer(subscriptionID: UInt32) {
        router.statistics.slowConsumerDisconnects += 1
        let pattern = subscriptions[subscriptionID]?.text ?? "?"
        logger.warning(
            "disconnecting slow consumer", metadata: ["subscription": "\(subscriptionID)", "pattern": "\(pattern)"])
        _ = outbound.discardUnflushed()
        held = nil
        router.stoppedHolding(self)
        outbound.append(
            .error(
                ErrorFrame(
                    requestID: ProtocolConstants.noRequest, code: .slowConsumer,
                    message: "the client did not read its notifications fast enough (over \(limit) bytes pending) "
                        + "and subscription \(subscriptionID) ('\(pattern)') asked to be disconnected")))
        syncAccount()
        closeAfterFlushing()
        // A peer that never reads again would keep the connection open forever: close it after a grace period.
        let grace = TimeAmount.nanoseconds(Int64(router.configuration.slowConsumerGraceSeconds * 1e9))
        context?.eventLoop.assumeIsolated().scheduleTask(in: grace) { [self] in forceClose() }
    }

    /// Keeps the user's account in step with this connection's pending and held bytes.
    private func syncAccount() {
        let now = outbound.pendingBytes + (held?.bytes ?? 0)
        account?.outboundBytes += now - accountedBytes
        accountedBytes = now
    }

    // MARK: Output

    private func reply(_ frame: ServerFrame) {
        outbound.append(frame)
        syncAccount()
        markDirty()
        if outbound.pendingBytes > limit, !isReadingPaused, let context {
            // The client sends requests faster than it reads their replies: stop reading its requests until
            // it catches up, so its replies cannot grow without bound either.
            isReadingPaused = true
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
    }

    private func reject(_ requestID: UInt32, _ code: ErrorCode, _ message: String) {
        logger.debug("request rejected", metadata: ["code": "\(code)", "reason": "\(message)"])
        reply(.error(ErrorFrame(requestID: requestID, code: code, message: message)))
    }

    /// Sends a fatal error and closes this connection once it is written; nothing else is read from it.
    private func fail(_ code: ErrorCode, _ message: String) {
        guard state == .awaitingHello || state == .open else { return }
        logger.notice("protocol error, closing connection", metadata: ["code": "\(code)", "reason": "\(message)"])
        failClosing(code, message)
    }

    private func failClosing(_ code: ErrorCode, _ message: String) {
        outbound.append(
            .error(ErrorFrame(requestID: ProtocolConstants.noRequest, rawCode: code.rawValue, closesConnection: true, message: message)))
        syncAccount()
        markDirty()
        closeAfterFlushing()
    }

    /// Stops serving and closes once everything queued has been written.
    func closeAfterFlushing() {
        guard state != .closed else { return }
        state = .closing
        markDirty()
    }

    /// Starts a graceful close for daemon shutdown: everything already queued is written, then a `GOODBYE`
    /// frame tells the client to reconnect calmly, after a delay spread over ``goodbyeReconnectDelays`` so that
    /// the clients of a restarting daemon do not all come back at once; then the connection closes.
    ///
    /// - Returns: a future that completes when the channel has closed.
    /// Serves every whole frame already received, whatever the per-turn budget: the first step of a graceful
    /// shutdown, for every connection before any gets its `GOODBYE`, so that a post the daemon has taken from
    /// its socket reaches every subscriber. (A connection whose groups are still being looked up has been served
    /// nothing yet and is left so.)
    func serveReceivedFrames() {
        guard state == .awaitingHello || state == .open, !awaitingIdentity else { return }
        servingDeferred = false
        isReadingPaused = false  // what is served now is written before the GOODBYE, within the deadline
        while state == .awaitingHello || state == .open, accumulator.bufferedBytes > 0 {
            startTurn()
            let before = accumulator.bufferedBytes
            serveBufferedFrames()
            if accumulator.bufferedBytes == before { break }  // only a partial frame is left
        }
        servingDeferred = false
    }

    func beginShutdown() -> EventLoopFuture<Void> {
        guard let context else { return router.eventLoop.makeSucceededVoidFuture() }
        if state == .awaitingHello || state == .open {
            // What is held for a slow or suspended client is bounded already: send it too, in order, so
            // nothing posted before the shutdown is lost without a word.
            if held != nil {
                held!.release(into: &outbound.buffer, budget: Int.max)
                held = nil
                router.stoppedHolding(self)
                syncAccount()
            }
            outbound.append(
                .goodbye(
                    GoodbyeFrame(
                        reconnectAfterMilliseconds: UInt32.random(in: Self.goodbyeReconnectDelays),
                        reason: "notifyd is shutting down")))
            closeAfterFlushing()
        }
        return context.channel.closeFuture
    }

    /// The range of `GOODBYE.reconnect_after_ms` values, in milliseconds (PROTOCOL.md § 7).
    static let goodbyeReconnectDelays: ClosedRange<UInt32> = 250...1_000

    /// Closes at once, discarding what is queued (when the shutdown deadline has passed).
    func forceClose() {
        guard state != .closed else { return }
        context?.close(promise: nil)
    }

    private func markDirty() {
        if !isDirty {
            isDirty = true
            router.markDirty(self)
        }
    }

    /// Writes and flushes everything queued since the last flush (called once per read burst by the router).
    func flushOutbound() {
        isDirty = false
        guard let context, state != .closed else { return }
        if outbound.hasUnflushedBytes {
            let bytes = outbound.takeForWrite()
            let count = bytes.readableBytes
            // Most writes finish inside this call, and a promise per write (an allocation, a callback and a
            // generic-metadata lookup) was a tenth of a lone message's time in the daemon. So write without
            // one: if the channel no longer holds the bytes afterwards, they were written (and their storage
            // takes the next batch). Only a write the channel could not finish gets a completion: an empty
            // write behind it, which the channel completes once everything before it is written.
            context.writeAndFlush(wrapOutboundOut(bytes), promise: nil)
            if outbound.recycle(bytes) {
                writeCompleted(count)
            } else {
                let barrier = context.eventLoop.makePromise(of: Void.self)
                barrier.futureResult.assumeIsolated().whenComplete { [self] _ in
                    writeCompleted(count)
                }
                context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0)), promise: barrier)
            }
        }
        if state == .closing, outbound.pendingBytes == 0 {
            state = .closed
            router.unregister(self)
            context.close(promise: nil)
        }
    }

    private func writeCompleted(_ count: Int) {
        outbound.completeWrite(count)
        syncAccount()
        guard state != .closed else { return }
        releaseHeldIfPossible()
        if isReadingPaused, outbound.pendingBytes <= limit / 2 {
            isReadingPaused = false
            // Frames left unserved while paused are served at the next turn (never from inside a write's
            // completion, which can run while another connection's frames are being served).
            if accumulator.bufferedBytes > 0, !awaitingIdentity {
                deferServing()
            } else {
                resumeReadingIfAllowed()
            }
        }
        if state == .closing, outbound.pendingBytes == 0 {
            flushOutbound()
        }
    }

    // MARK: Introspection

    func introspection() -> Introspection.Client {
        Introspection.Client(
            connection: number, pid: credentials.pid, uid: credentials.uid, gid: credentials.gid,
            command: command, clientName: clientName, subscriptions: subscriptions.count,
            pendingBytes: outbound.pendingBytes, heldBytes: held?.bytes ?? 0, suspended: suspendCount > 0,
            merged: merged, dropped: dropped)
    }
}
