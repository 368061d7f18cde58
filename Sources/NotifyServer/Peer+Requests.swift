import NIOCore
import NotifyWire

extension Peer {
    /// Serves one decoded request.
    func handle(_ frame: ClientFrame) {
        if case .hello(let hello) = frame {
            handleHello(hello)
            return
        }
        guard isOpen else {
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
            queue.suspend()
            reply(.ok(requestID: requestID))
        case .resume(let requestID):
            handleResume(requestID: requestID)
        case .query(let requestID, let kind, let argument):
            switch broker.query(kind: kind, argument: argument, requester: identity) {
            case .success(let parts):
                for part in parts.dropLast() { reply(.queryResultPart(requestID: requestID, json: part)) }
                reply(.queryResult(requestID: requestID, json: parts.last!))
            case .failure(let denial): reject(requestID, .invalidRequest, denial.message)
            }
        }
    }

    private func handleHello(_ hello: ClientFrame.Hello) {
        guard phase == .awaitingHello else {
            fail(.unexpectedHello, "HELLO was already received on this connection")
            return
        }
        guard hello.version == ProtocolConstants.version else {
            fail(
                .unsupportedVersion,
                "protocol version \(hello.version) is not supported; this daemon speaks version \(ProtocolConstants.version)")
            return
        }
        // Every client's name is in root's `clients` answer and in the logs: a longer one is cut, not refused.
        opened(clientName: hello.clientName.truncatedUTF8(maxBytes: ProtocolConstants.maxClientNameLength), flags: hello.flags)
        reply(
            .welcome(
                ServerFrame.Welcome(
                    daemonPID: broker.daemonPID, instanceID: broker.instanceID, limits: broker.configuration.limits,
                    serverName: broker.configuration.serverName)))
    }

    private func handleSubscribe(_ subscribe: ClientFrame.Subscribe) {
        let requestID = subscribe.requestID
        let unknownFlags = subscribe.flags.subtracting(.known)
        guard unknownFlags.isEmpty else {
            reject(requestID, .unsupportedFlags, "SUBSCRIBE flags 0x\(String(unknownFlags.rawValue, radix: 16)) are not defined")
            return
        }
        guard !subscribe.flags.isSuperset(of: [.states, .marksRetained]) else {
            reject(
                requestID, .unsupportedFlags,
                "SUBSCRIBE flag 0x04 (marks-retained) does not go with 0x02 (states): a state subscription delivers no posts")
            return
        }
        guard let policy = subscribe.policy else {
            reject(
                requestID, .invalidRequest,
                "policy \(subscribe.policyCode) with queue limit \(subscribe.queueLimit) is not valid "
                    + "(0 coalesce and 2 disconnect take limit 0; 1 queue takes a limit of at least 1)")
            return
        }
        let limits = broker.configuration.limits
        let pattern: NotificationPattern
        do {
            pattern = try NotificationPattern(subscribe.pattern, maxLength: Int(limits.maxNameLength))
        } catch {
            reject(requestID, .invalidName, error.description)
            return
        }
        if let problem = Self.processLocalProblem(pattern.text) {
            reject(requestID, .invalidName, problem)
            return
        }
        guard subscriptions[subscribe.subscriptionID] == nil, stateSubscriptions[subscribe.subscriptionID] == nil else {
            reject(requestID, .duplicateSubscription, "subscription id \(subscribe.subscriptionID) is already in use on this connection")
            return
        }
        guard subscriptionCount < Int(limits.maxSubscriptions) else {
            reject(requestID, .tooManySubscriptions, "this connection already holds the maximum of \(limits.maxSubscriptions) subscriptions")
            return
        }
        if let denial = account.subscriptionRefusal() {
            reject(requestID, .quotaExceeded, denial)
            return
        }
        if let denial = broker.access.checkObserve(pattern, by: identity) {
            logger.notice("subscription denied", metadata: ["name": "\(pattern.text)", "reason": "\(denial.message)"])
            reject(requestID, .permissionDenied, denial.message)
            return
        }
        // A pattern new to this peer adds its labels to the trie, which every post may walk: charged to the user
        // (the same pattern again on this peer adds nothing).
        // State subscriptions have a trie of their own, so a pattern is charged again there.
        let watchesStates = subscribe.flags.contains(.states)
        let entry = SubscriptionTable.Subscription(pattern, policy)
        let labels = (watchesStates ? stateSubscriptions : subscriptions).patternLabels(adding: entry)
        if let denial = account.chargeSubscription(patternLabels: labels) {
            reject(requestID, .quotaExceeded, denial)
            return
        }
        if watchesStates {
            stateSubscriptions.add(subscribe.subscriptionID, entry, peer: self, index: broker.stateWatchers)
            // Current values first: the OK that follows tells the client they are complete.
            if subscribe.flags.contains(.sendRetained) { sendCurrentStates(matching: pattern, requestID: requestID) }
            reply(.ok(requestID: requestID))
            return
        }
        subscriptions.add(
            subscribe.subscriptionID, entry, marksRetained: subscribe.flags.contains(.marksRetained), peer: self,
            index: broker.index)
        // Retained notifications first: the OK that follows tells the client the current values are complete.
        if subscribe.flags.contains(.sendRetained) {
            for var notification in broker.store.retainedNotifications(
                matching: pattern, where: { broker.mayObserve($0, identity) })
            {
                // The origin of a relayed one, as in a NOTIFICATION: only for a client that asked for origins.
                if !acceptsOrigins { notification.origin = nil }
                queue.appendWithoutCheck(.retained(requestID: requestID, notification))
            }
        }
        reply(.ok(requestID: requestID))
    }

    private func handleUnsubscribe(requestID: UInt32, subscriptionID: UInt32) {
        guard
            let (_, labels) = subscriptions.remove(subscriptionID, peer: self, index: broker.index)
                ?? stateSubscriptions.remove(subscriptionID, peer: self, index: broker.stateWatchers)
        else {
            reject(requestID, .unknownSubscription, "no subscription with id \(subscriptionID) on this connection")
            return
        }
        account.releaseSubscriptions(1, patternLabels: labels)
        reply(.ok(requestID: requestID))
    }

    private func handlePost(_ post: ClientFrame.Post) {
        let unknownFlags = post.flags.subtracting(.known)
        guard unknownFlags.isEmpty else {
            reject(post.requestID, .unsupportedFlags, "POST flags 0x\(String(unknownFlags.rawValue, radix: 16)) are not defined")
            return
        }
        // A name with exact subscribers passed the grammar when it was subscribed; others need checking. The
        // lookup is handed on to the broker, so a post looks its name up once.
        let subscribers = broker.exactSubscribers(of: post.name)
        if subscribers == nil, let problem = invalidNameReason(post.name) {
            reject(post.requestID, .invalidName, problem)
            return
        }
        let maxPayload = broker.configuration.limits.maxPayloadLength
        guard post.payload.readableBytes <= Int(maxPayload) else {
            reject(
                post.requestID, .payloadTooLarge,
                "payload of \(post.payload.readableBytes) bytes exceeds the limit of \(maxPayload) bytes")
            return
        }
        if let origin = post.origin {
            // The NOTIFICATION_MERGED of a relayed post carries the origin too: it must fit the frame limit every
            // client enforces.
            let merged = origin.largestFrameLength(
                nameByteCount: post.name.utf8.count, payloadByteCount: post.payload.readableBytes)
            let limit = Int(broker.configuration.limits.maxFrameLength)
            guard merged <= limit else {
                reject(
                    post.requestID, .payloadTooLarge,
                    "with its origin, the notification of this payload would be a frame of \(merged) bytes, over the limit of \(limit)")
                return
            }
        }
        if let denial = broker.access.checkPost(post.name, by: identity, action: "post") {
            logger.notice("post denied", metadata: ["name": "\(post.name)", "reason": "\(denial.message)"])
            reject(post.requestID, .permissionDenied, denial.message)
            return
        }
        let retain = post.flags.contains(.retain)
        if retain, let denial = broker.store.checkRetain(post.payload.readableBytes, name: post.name, account: account) {
            reject(post.requestID, .quotaExceeded, denial)
            return
        }
        if post.flags.isEmpty {
            broker.postInRun(name: post.name, payload: post.payload, from: self, exactSubscribers: subscribers)
            return
        }
        let (sequence, delivered) = broker.post(
            name: post.name, payload: post.payload, sender: credentials, origin: post.origin, retain: retain,
            exactSubscribers: subscribers, poster: self)
        if post.flags.contains(.ackWanted) {
            reply(.posted(requestID: post.requestID, sequence: sequence, deliveredCount: delivered))
        }
    }

    private func handleSetState(requestID: UInt32, name: String, value: UInt64) {
        if let problem = invalidNameReason(name) {
            reject(requestID, .invalidName, problem)
            return
        }
        if let denial = broker.access.checkPost(name, by: identity, action: "set the state of") {
            logger.notice("state change denied", metadata: ["name": "\(name)", "reason": "\(denial.message)"])
            reject(requestID, .permissionDenied, denial.message)
            return
        }
        if let denial = broker.store.setState(value, for: name, account: account) {
            reject(requestID, .quotaExceeded, denial)
            return
        }
        // Watchers first, as a post reaches its subscribers before its POSTED: after the OK, every watcher has the
        // change queued.
        broker.announceStateChange(name: name, value: value, setter: self)
        // Watching its own changes, it may have been closed as too slow for them: then no reply follows the ERROR.
        guard isOpen else { return }
        reply(.ok(requestID: requestID))
    }

    private func handleGetState(requestID: UInt32, name: String) {
        if let problem = invalidNameReason(name) {
            reject(requestID, .invalidName, problem)
            return
        }
        if let rule = broker.access.rule(for: name), !broker.access.mayObserve(rule, identity) {
            reject(
                requestID, .permissionDenied,
                "permission denied: you may not observe names under '\(rule.prefix)' (\(AccessControl.reference(to: rule)))")
            return
        }
        reply(.state(requestID: requestID, value: broker.store.state(of: name)))
    }

    private func handleResume(requestID: UInt32) {
        guard queue.resume() else {
            reject(requestID, .invalidRequest, "RESUME without a matching SUSPEND")
            return
        }
        reply(.ok(requestID: requestID))
        if !queue.isSuspended { broker.releaseHeld(self) }
    }

    private func invalidNameReason(_ name: String) -> String? {
        do {
            try NotificationName.validate(name, maxLength: Int(broker.configuration.limits.maxNameLength))
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
}
