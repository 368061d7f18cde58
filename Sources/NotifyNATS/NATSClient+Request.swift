import NIOCore

/// Request/reply: a request is published with a reply subject under the client's own inbox, and the reply comes
/// back through one wildcard subscription on that inbox (`_INBOX.<random>.*`), matched to its request by the last
/// token. The inbox subscription is an ordinary one, so it is sent again on every new connection.
extension NATSClient {
    /// Something that happens to the client as a whole, for the parts of this module that keep server-side state
    /// (a key-value watch's consumer) and must recreate it.
    enum LifecycleEvent: Sendable {
        /// Connected again after a lost connection: subscriptions are back, server-side consumers may not be.
        case reconnected
        /// ``NATSClient/close()`` was called.
        case closed
    }

    /// Sends `payload` (with `headers`, if any) to `subject` and waits for the first reply.
    ///
    /// A request made while the client is disconnected waits in the outbox and is sent on reconnection, even after
    /// its timeout has failed the call: a caller that timed out cannot assume the request had no effect (a
    /// JetStream put may still be stored). A reply lost with a connection is not resent, and the request times out.
    ///
    /// - Returns: the reply, as received (its headers may carry a status, e.g. JetStream's `404`).
    /// - Throws: ``NATSClientError/timedOut(_:)`` when no reply comes within `timeout`;
    ///   ``NATSClientError/noResponders(_:)`` when no one subscribes to `subject` (the server's `503` status);
    ///   ``NATSClientError/outboxFull``, ``NATSClientError/invalidSubject(_:)``,
    ///   ``NATSClientError/payloadTooLarge(size:limit:)`` or ``NATSClientError/closed``.
    package func request(
        _ subject: String, payload: ByteBuffer = ByteBuffer(), headers: NATSHeaders? = nil,
        timeout: TimeAmount = .seconds(5)
    ) async throws(NATSClientError) -> NATSMessage {
        guard NATSSubject.isValidPublishSubject(subject) else { throw .invalidSubject(subject) }
        // Made only for a client not closed: once its event loop is gone, a promise could not be completed.
        let registered = state.withLockedValue {
            state -> Result<(EventLoopPromise<NATSMessage>, token: String, replyTo: String), NATSClientError> in
            if state.closeStarted { return .failure(.closed) }
            if state.inboxSID == nil {
                let handler: @Sendable (NATSMessage) -> Void = { [weak self] reply in self?.receivedReply(reply) }
                switch state.addSubscription(subject: state.inboxPrefix + ".*", queueGroup: nil, handler: handler) {
                case .success(let subscription): state.inboxSID = subscription.sid
                case .failure(let error): return .failure(error)
                }
            }
            guard beginOperation(&state) else { return .failure(.closed) }
            let token = String(state.nextRequestToken, radix: 36)
            state.nextRequestToken += 1
            let promise = eventLoop.makePromise(of: NATSMessage.self)
            state.pendingRequests[token] = promise
            return .success((promise, token, state.inboxPrefix + "." + token))
        }
        let (promise, token, replyTo) = try registered.get()
        defer { endOperation() }
        func abandon(_ error: NATSClientError) -> NATSClientError {
            state.withLockedValue { _ = $0.pendingRequests.removeValue(forKey: token) }
            promise.fail(error)
            return error
        }
        let accepted: Bool
        do {
            accepted = try publish(subject, payload: payload, headers: headers, replyTo: replyTo)
        } catch {
            throw abandon(error)
        }
        guard accepted else { throw abandon(.outboxFull) }
        let timer = eventLoop.scheduleTask(in: timeout) {
            let waiting = self.state.withLockedValue { $0.pendingRequests.removeValue(forKey: token) }
            waiting?.fail(NATSClientError.timedOut("no reply to a request on '\(subject)' within \(timeout.nanoseconds / 1_000_000) ms"))
        }
        defer { timer.cancel() }
        let reply: NATSMessage
        do {
            reply = try await promise.futureResult.get()
        } catch let error as NATSClientError {
            throw error
        } catch {
            throw .closed  // the promise only ever fails with a NATSClientError
        }
        // The server's answer when nothing subscribes: a header-only message with status 503.
        if reply.headers?.status == 503, reply.payload.readableBytes == 0 { throw .noResponders(subject) }
        return reply
    }

    /// A new subject no one else uses, for a subscription of its own (`_INBOX.<random>`).
    func newInbox() -> String { "_INBOX." + ClientState.randomToken() }

    /// Registers `observer` for reconnections and the close; returns its id for ``removeLifecycleObserver(_:)``.
    /// A client already closed calls it at once with ``LifecycleEvent/closed``.
    func addLifecycleObserver(_ observer: @escaping @Sendable (LifecycleEvent) -> Void) -> UInt64? {
        let id = state.withLockedValue { state -> UInt64? in
            if case .closed = state.phase { return nil }
            if state.closeStarted { return nil }
            let id = state.nextObserverID
            state.nextObserverID += 1
            state.lifecycleObservers[id] = observer
            return id
        }
        if id == nil { observer(.closed) }
        return id
    }

    func removeLifecycleObserver(_ id: UInt64) {
        state.withLockedValue { _ = $0.lifecycleObservers.removeValue(forKey: id) }
    }

    private func receivedReply(_ reply: NATSMessage) {
        guard let dot = reply.subject.utf8.lastIndex(of: UInt8(ascii: ".")) else { return }
        let token = String(reply.subject[reply.subject.utf8.index(after: dot)...])
        let waiting = state.withLockedValue { $0.pendingRequests.removeValue(forKey: token) }
        waiting?.succeed(reply)
    }
}
