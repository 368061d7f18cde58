import Logging
import NIOCore
import NotifyWire

/// One client connection: decodes its frames, carries out its requests against the router, and owns its
/// bounded outbound queue. Runs on the server's event loop only.
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

    private let router: SubscriptionRouter
    private var context: ChannelHandlerContext?
    private var state = State.awaitingHello
    private var accumulator: FrameAccumulator<ClientFrame>
    private var outbound: OutboundQueue
    private var isDirty = false
    private var isReadingPaused = false
    private(set) var logger: Logger

    /// The peer's credentials from `SO_PEERCRED`, stamped on every notification it posts.
    private(set) var credentials = SenderCredentials(pid: 0, uid: UInt32.max, gid: UInt32.max)
    private(set) var clientName = ""
    /// The connection's number in accept order.
    private(set) var number: UInt64 = 0
    /// Subscription id → name.
    private var subscriptions: [UInt32: String] = [:]
    /// Name → number of this connection's subscriptions naming it.
    private(set) var subscribedNames: [String: Int] = [:]

    init(router: SubscriptionRouter) {
        self.router = router
        self.accumulator = FrameAccumulator(maxFrameLength: router.configuration.limits.maxFrameLength)
        self.outbound = OutboundQueue(limit: router.configuration.outboundByteLimit, allocator: ByteBufferAllocator())
        self.logger = router.logger
    }

    var subscriptionCount: Int { subscriptions.count }
    var pendingOutboundBytes: Int { outbound.pendingBytes }
    var droppedNotifications: UInt64 { outbound.droppedTotal }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func channelActive(context: ChannelHandlerContext) {
        number = router.register(self)
        if let peer = PeerCredentials.read(from: context.channel) {
            credentials = peer
        }
        logger[metadataKey: "connection"] = "\(number)"
        logger[metadataKey: "pid"] = "\(credentials.pid)"
        logger[metadataKey: "uid"] = "\(credentials.uid)"
        logger.debug("connection opened")
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if state != .closed {
            state = .closed
            router.unregister(self)
            logger.debug(
                "connection closed",
                metadata: outbound.droppedTotal > 0 ? ["dropped": "\(outbound.droppedTotal)"] : nil)
        }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state == .awaitingHello || state == .open else { return }
        accumulator.append(unwrapInboundIn(data))
        do throws(WireDecodingError) {
            while state == .awaitingHello || state == .open, let frame = try accumulator.next() {
                handle(frame)
            }
        } catch {
            fail(error.code, error.description)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        router.flushDirtyConnections()
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            // The peer finished sending. A partial frame left behind is a protocol violation worth reporting;
            // otherwise write whatever is still queued for it, then close.
            do throws(WireDecodingError) {
                try accumulator.finish()
                closeAfterFlushing()
            } catch {
                fail(error.code, error.description)
            }
            router.flushDirtyConnections()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        logger.debug("connection error", metadata: ["error": "\(error)"])
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
        case .subscribe(let requestID, let subscriptionID, let name):
            handleSubscribe(requestID: requestID, subscriptionID: subscriptionID, name: name)
        case .unsubscribe(let requestID, let subscriptionID):
            handleUnsubscribe(requestID: requestID, subscriptionID: subscriptionID)
        case .post(let post):
            handlePost(post)
        case .ping(let requestID):
            reply(.pong(requestID: requestID))
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
        clientName = hello.clientName
        logger[metadataKey: "client"] = "\(hello.clientName)"
        reply(
            .welcome(
                ServerFrame.Welcome(
                    daemonPID: router.daemonPID, instanceID: router.instanceID, limits: router.configuration.limits,
                    serverName: router.configuration.serverName)))
    }

    private func handleSubscribe(requestID: UInt32, subscriptionID: UInt32, name: String) {
        if let problem = invalidNameReason(name) {
            reject(requestID, .invalidName, problem)
            return
        }
        guard subscriptions[subscriptionID] == nil else {
            reject(requestID, .duplicateSubscription, "subscription id \(subscriptionID) is already in use on this connection")
            return
        }
        guard subscriptions.count < Int(router.configuration.limits.maxSubscriptions) else {
            reject(
                requestID, .tooManySubscriptions,
                "this connection already holds the maximum of \(router.configuration.limits.maxSubscriptions) subscriptions")
            return
        }
        subscriptions[subscriptionID] = name
        let count = subscribedNames[name, default: 0]
        subscribedNames[name] = count + 1
        if count == 0 { router.addSubscriber(self, to: name) }
        reply(.ok(requestID: requestID))
    }

    private func handleUnsubscribe(requestID: UInt32, subscriptionID: UInt32) {
        guard let name = subscriptions.removeValue(forKey: subscriptionID) else {
            reject(requestID, .unknownSubscription, "no subscription with id \(subscriptionID) on this connection")
            return
        }
        let count = subscribedNames[name, default: 1] - 1
        if count == 0 {
            subscribedNames.removeValue(forKey: name)
            router.removeSubscriber(self, from: name)
        } else {
            subscribedNames[name] = count
        }
        reply(.ok(requestID: requestID))
    }

    private func handlePost(_ post: ClientFrame.Post) {
        let unknownFlags = post.flags.subtracting(.known)
        guard unknownFlags.isEmpty else {
            reject(post.requestID, .unsupportedFlags, "POST flags 0x\(String(unknownFlags.rawValue, radix: 16)) are not defined")
            return
        }
        // A name with subscribers passed the grammar when it was subscribed; only unknown names need checking.
        if !router.hasSubscribers(post.name), let problem = invalidNameReason(post.name) {
            reject(post.requestID, .invalidName, problem)
            return
        }
        let limit = router.configuration.limits.maxPayloadLength
        guard post.payload.readableBytes <= Int(limit) else {
            reject(
                post.requestID, .payloadTooLarge,
                "payload of \(post.payload.readableBytes) bytes exceeds the limit of \(limit) bytes")
            return
        }
        let (sequence, delivered) = router.post(name: post.name, payload: post.payload, sender: credentials)
        if post.flags.contains(.ackWanted) {
            reply(.posted(requestID: post.requestID, sequence: sequence, deliveredCount: delivered))
        }
    }

    private func invalidNameReason(_ name: String) -> String? {
        do {
            try NotificationName.validate(name, maxLength: Int(router.configuration.limits.maxNameLength))
        } catch {
            return error.description
        }
        if NotificationName.isProcessLocal(name) {
            return "invalid name '\(name)': names starting with 'self.' are process-local and never reach the daemon"
        }
        return nil
    }

    // MARK: Output

    /// Queues a notification frame shared by all recipients. Returns `false` if it was dropped by the bound.
    func enqueueNotification(_ frame: ByteBuffer) -> Bool {
        guard state == .open else { return false }
        guard outbound.appendNotification(frame) else { return false }
        markDirty()
        return true
    }

    private func reply(_ frame: ServerFrame) {
        outbound.appendReply(frame)
        markDirty()
        if outbound.isOverLimit, !isReadingPaused, let context {
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
        outbound.appendReply(.error(ErrorFrame(requestID: ProtocolConstants.noRequest, code: code, message: message)))
        markDirty()
        closeAfterFlushing()
    }

    /// Stops serving and closes once everything queued has been written.
    func closeAfterFlushing() {
        guard state != .closed else { return }
        state = .closing
        markDirty()
    }

    /// Starts a graceful close for daemon shutdown: everything already queued is written, then an
    /// `ERROR shutting-down` frame tells the client to reconnect later, then the connection closes.
    ///
    /// - Returns: a future that completes when the channel has closed.
    func beginShutdown() -> EventLoopFuture<Void> {
        guard let context else { return router.eventLoop.makeSucceededVoidFuture() }
        if state == .awaitingHello || state == .open {
            outbound.appendReply(
                .error(ErrorFrame(requestID: ProtocolConstants.noRequest, code: .shuttingDown, message: "notifyd is shutting down")))
            closeAfterFlushing()
        }
        return context.channel.closeFuture
    }

    /// Closes at once, discarding what is queued (when the shutdown deadline has passed).
    func forceClose() {
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
            let promise = context.eventLoop.makePromise(of: Void.self)
            promise.futureResult.assumeIsolated().whenComplete { [self] _ in
                writeCompleted(count)
            }
            context.writeAndFlush(wrapOutboundOut(bytes), promise: promise)
        }
        if state == .closing, outbound.pendingBytes == 0 {
            state = .closed
            router.unregister(self)
            context.close(promise: nil)
        }
    }

    private func writeCompleted(_ count: Int) {
        outbound.completeWrite(count)
        guard state != .closed else { return }
        if outbound.appendOverflowNoticeIfDrained() {
            flushOutbound()
        }
        if isReadingPaused, outbound.pendingBytes <= outbound.limit / 2, let context {
            isReadingPaused = false
            context.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
            context.read()
        }
        if state == .closing, outbound.pendingBytes == 0 {
            flushOutbound()
        }
    }
}
