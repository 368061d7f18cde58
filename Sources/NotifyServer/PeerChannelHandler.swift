import NIOCore
import NotifyWire

/// The NIO side of one client connection: reads and frames its bytes, serves them through its ``Peer`` within a
/// per-turn budget, and writes what the peer is sent. It decides when to read; the peer decides what to answer.
final class PeerChannelHandler: ChannelInboundHandler, PeerTransport {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let broker: Broker
    private var context: ChannelHandlerContext?
    private var peer: Peer?
    /// What background lookups for this connection hold of it, cut when it closes.
    private var lookupLink: LookupLink?
    private var accumulator: FrameAccumulator<ClientFrame>
    /// Set until the peer's groups are known: nothing is served before, since an access decision needs them.
    private var awaitingIdentity = false
    /// Reading was switched off while the groups are looked up.
    private var readingPausedForIdentity = false
    /// Reading waits until every connection of a hand-over is restored (``startServingHandedOver()``).
    private var readingPausedForHandover = false
    /// The peer closed its side while frames were still to be served (``awaitingIdentity`` or
    /// ``servingDeferred``): handled once they have been.
    private var inputClosedPending = false
    /// Frames wait in the accumulator for the next turn of the event loop (see ``turnBudget``); reading is
    /// off meanwhile.
    private var servingDeferred = false
    /// Inside this channel's read completion, which NIO also fires on EOF and then goes on to close the
    /// channel's input: a write that fails there (the peer is gone) would close the whole channel under it. The
    /// peer's flush waits for the next tick meanwhile (other peers' flushes do not); its bytes stay queued, in order.
    private var isCompletingRead = false
    /// A frame is being served from the bytes it lies in, in the accumulator (``Peer/serveInPlace``): the peer's
    /// flush waits until that frame is served (``flushOwnQueueIfDeferred()``), since a write that fails makes NIO
    /// read this channel at once, and a write that completes can relieve back-pressure: both would reach the
    /// accumulator while its bytes are lent out.
    private var isServingInPlace = false
    /// The peer's flush asked for while a frame was served in place, done as soon as that frame is served.
    private var flushAfterServingInPlace: (() -> Void)?
    /// That flush is under way: a read it causes is kept for the next turn (as during the broker's routing).
    private var isFlushingOwnQueue = false
    /// A flush of the peer is due at the next tick.
    private var isFlushScheduled = false
    /// A graceful shutdown's last read is under way: what arrives is kept for ``serveReceivedFrames(atShutdown:)``.
    private var isReadingLast = false
    /// This turn's frames, in ``turnBudget`` units; its requests and posts served through the full path (for
    /// ``Peer/mostFramesInOneTurn``); pattern nodes visited.
    private var turnCost = 0
    private var turnFullPathFrames = 0
    private var turnPatternVisits = 0
    /// Frames served, and posts served from their bytes that did not continue a run, since the routes of the frames
    /// ahead were last loaded.
    private var framesSincePrefetch = 0
    private var postsFromBytesSincePrefetch = 0
    /// The name hash of each of the frames after the last loading ahead (`nil`: not a post), in order: the
    /// lookups need not hash the names again.
    private var nameHashes: [Int?] = []
    /// How many frames ahead a poster spreading its posts over names has their routes loaded at once.
    static let prefetchGroup = 16

    /// The socket's cookie (`SO_COOKIE`): what a hand-over matches sockets by. Read at the first hand-over that
    /// asks (0 once the channel is gone), not per connection: most connections are never handed over.
    var cookie: UInt64 {
        if let knownCookie { return knownCookie }
        guard let context else { return 0 }
        let cookie = SocketCookie.read(from: context.channel) ?? 0
        knownCookie = cookie
        return cookie
    }
    private var knownCookie: UInt64?
    /// How the connection starts: accepted, taken over with its record, or taken over without one (the
    /// snapshot could not be read): that client is sent `GOODBYE` and reconnects.
    private var origin: Origin

    /// How a connection came to this daemon.
    enum Origin {
        case accepted
        case handedOver(HandoverSnapshot.PeerRecord)
        case handedOverWithoutRecord
    }

    init(broker: Broker, origin: Origin = .accepted) {
        self.broker = broker
        self.origin = origin
        self.accumulator = FrameAccumulator(maxFrameLength: broker.configuration.limits.maxFrameLength)
    }

    /// What one peer's frames may cost in one turn of the event loop; the rest waits for the next turn, after
    /// other connections' events: a client that pipelines thousands of subscriptions cannot hold the loop from
    /// everyone else. One budget for every kind of frame, so a turn is never longer than its costliest kind allows.
    static let turnBudget = 1_024
    /// A request's cost: 64 a turn.
    static let requestCost = 16
    /// A post that starts a run (to another name than the last, or with the ack or retain flag: decoded, checked,
    /// routed): 256 a turn.
    static let runStartCost = 4
    /// A plain post to a name with one subscriber, served from its bytes straight into that subscriber's queue (no
    /// decoding, no run): about half the work of a decoded post, so 512 a turn take about as long as 256 of those.
    /// A post that starts a run from its bytes costs ``runStartCost``: its recipients cost what a decoded one's do.
    static let postAloneCost = 2
    /// A post that continues a run (about a copy of its bytes): 1,024 a turn.
    static let runPostCost = 1
    /// Requests served in a turn that has nothing else.
    static let framesPerTurn = turnBudget / requestCost
    /// Posts that start a run served in a turn that has nothing else.
    static let runStartsPerTurn = turnBudget / runStartCost
    /// Plain posts served alone in a turn that has nothing else.
    static let postsAlonePerTurn = turnBudget / postAloneCost
    /// Pattern trie nodes the frames of one peer may have matches visit in one turn: posts to names that many
    /// patterns could match cost more than others, and are counted by that cost.
    static let patternVisitsPerTurn = 8_192

    /// Starts a new turn's budget.
    private func startTurn() {
        turnCost = 0
        turnFullPathFrames = 0
        turnPatternVisits = 0
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // The handler and its context hold each other: break the cycle, or every closed connection leaks.
        self.context = nil
        lookupLink?.cut()
    }

    func channelActive(context: ChannelHandlerContext) {
        if case .handedOver(let record) = origin {
            takeOver(record, context: context)
            return
        }
        let credentials =
            PeerCredentials.read(from: context.channel) ?? SenderCredentials(pid: 0, uid: UInt32.max, gid: UInt32.max)
        let peer = Peer(broker: broker, credentials: credentials, transport: self)
        self.peer = peer
        if case .handedOverWithoutRecord = origin {
            // Its state was lost with the snapshot: tell the client to reconnect and subscribe again.
            peer.beginShutdown()
            broker.flushDirtyPeers()
            context.fireChannelActive()
            return
        }
        awaitingIdentity = true
        let link = makeLookupLink()
        broker.identities.resolve(
            credentials, groupsFound: { groups in link.handler?.groupsFound(groups) },
            commandFound: Self.commandFound(link), isWaiting: Self.isWaiting(link))
        if awaitingIdentity {
            // Nothing is read until the groups are known: the socket's buffer holds what the client sends.
            readingPausedForIdentity = true
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        // The connection ended during a graceful shutdown's last read (a reset after its last bytes): what that
        // read brought is served now, before the peer closes.
        if isReadingLast, !broker.isRouting { serveReceivedFrames(atShutdown: true) }
        // A read loop that ends in an error or EOF gets no channelReadComplete: flush what this connection's
        // last reads queued for others.
        broker.flushDirtyPeers()
        peer?.closed()
        lookupLink?.cut()
        context.fireChannelInactive()
    }

    /// What background lookups for this connection hold of it (``LookupLink``), cut when it closes.
    private func makeLookupLink() -> LookupLink {
        let link = LookupLink(self)
        lookupLink = link
        return link
    }

    /// Sets the peer's command name, unless it has one (a handed-over peer may have had it read by then).
    private static func commandFound(_ link: LookupLink) -> (String?) -> Void {
        { command in
            guard let peer = link.handler?.peer, peer.command == nil else { return }
            peer.command = command
        }
    }

    /// Whether the connection still waits for what a lookup finds: it is open and served.
    private static func isWaiting(_ link: LookupLink) -> () -> Bool {
        { link.handler?.peer?.isServing == true }
    }

    /// The peer's groups are known: serve what arrived meanwhile, and read again.
    private func groupsFound(_ groups: Set<UInt32>) {
        awaitingIdentity = false
        peer?.identityFound(groups: groups)
        guard readingPausedForIdentity else { return }  // found at once: reading never paused
        readingPausedForIdentity = false
        guard let peer, peer.isServing else { return }
        serveBufferedFrames(peer)
        closeInputIfPending(peer)
        broker.flushDirtyPeers()
        resumeReadingIfAllowed()
    }

    /// Turns reading back on unless something still holds it off: back-pressure, the identity lookup, or
    /// frames deferred to the next turn.
    private func resumeReadingIfAllowed() {
        guard let peer, peer.isServing, !peer.isBackPressured, !readingPausedForIdentity, !readingPausedForHandover,
            !servingDeferred, let context
        else { return }
        context.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let peer, peer.isServing else { return }
        accumulator.append(unwrapInboundIn(data))
        guard !awaitingIdentity, !servingDeferred, !isReadingLast else { return }
        guard !broker.isRouting, !isFlushingOwnQueue else {
            // Read while the broker hands out another peer's post (see Broker.isRouting), or while this peer's own
            // flush after a frame served in place fails: next turn.
            deferServing()
            return
        }
        serveBufferedFrames(peer)
    }

    /// Decodes and serves the complete frames received so far, up to this turn's budget.
    private func serveBufferedFrames(_ peer: Peer) {
        let maxPayload = Int(broker.configuration.limits.maxPayloadLength)
        do throws(WireDecodingError) {
            serving: while true {
                var next = nextFrameAllowance(peer)
                if case .serve = next {
                    guard let stopped = serveFramesInPlace(peer, maxPayload: maxPayload) else {
                        // The next frame (if whole) is one the peer did not take in place: decoded.
                        guard var frame = try accumulator.nextRawFrame() else { break serving }
                        account(try peer.serve(type: frame.type, body: &frame.body), peer)
                        continue serving
                    }
                    next = stopped
                }
                switch next {
                case .serve:
                    // A run of frames ended after one whose own flush then went: the next frame is checked afresh.
                    continue serving
                case .stop: break serving
                case .budgetSpent:
                    deferServing()
                    break serving
                case .loadAhead:
                    loadAhead()
                    continue serving
                }
            }
        } catch {
            peer.endServing()
            peer.fail(error.code, error.description)
        }
        peer.endServing()
    }

    /// Whether the peer's next frame may be served now (checked before each one).
    private enum Allowance {
        case serve
        /// Not serving, or back-pressured: the rest waits for a write completion or is never served.
        case stop
        /// This turn's budget is spent: the rest waits for the next turn.
        case budgetSpent
        /// The routes of the frames ahead are due to be loaded first (see ``loadAhead()``).
        case loadAhead
    }

    private func nextFrameAllowance(_ peer: Peer) -> Allowance {
        // A client that does not read its replies gets no more served until it does (a write completion serves the
        // rest): its requests, a QUERY above all, cannot grow its queue without bound.
        guard peer.isServing, !peer.isBackPressured else { return .stop }
        guard turnCost < Self.turnBudget, turnPatternVisits < Self.patternVisitsPerTurn else { return .budgetSpent }
        return framesSincePrefetch >= Self.prefetchGroup ? .loadAhead : .serve
    }

    /// Starts a group of ``prefetchGroup`` frames: if at least half of the last group were posts served from their
    /// bytes that did not continue a run (a poster spreading over names), the routes of the next group are loaded
    /// together (see `prefetchRoutes`).
    private func loadAhead() {
        if postsFromBytesSincePrefetch * 2 >= Self.prefetchGroup {
            broker.prefetchRoutes(of: accumulator, count: Self.prefetchGroup, hashes: &nameHashes)
        } else {
            nameHashes.removeAll(keepingCapacity: true)
        }
        framesSincePrefetch = 0
        postsFromBytesSincePrefetch = 0
    }

    /// Counts a served frame against the turn's budget and the loading-ahead group.
    private func account(_ served: Peer.ServedFrame, _ peer: Peer) {
        framesSincePrefetch += 1
        switch served {
        case .runPost:
            turnCost += Self.runPostCost
            return
        case .postAlone(let visits):
            postsFromBytesSincePrefetch += 1
            turnCost += Self.postAloneCost
            turnPatternVisits += visits
        case .runStartFromBytes(let visits):
            postsFromBytesSincePrefetch += 1
            turnCost += Self.runStartCost
            turnPatternVisits += visits
        case .runStart(let visits):
            turnCost += Self.runStartCost
            turnPatternVisits += visits
        case .request(let visits):
            turnCost += Self.requestCost
            turnPatternVisits += visits
        }
        turnFullPathFrames += 1
        peer.mostFramesInOneTurn = max(peer.mostFramesInOneTurn, turnFullPathFrames)
    }

    /// Serves the whole frames buffered where they lie in the accumulator (``Peer/serveInPlace``), as many in a row
    /// as the peer takes and its allowance lets it, in one access to the accumulator.
    ///
    /// - Returns: `nil` when the peer declined the next frame or no whole, valid frame is left (the next one, if
    ///   any, is for `nextRawFrame`); the allowance that stopped the run; or `.serve` when the run stopped after a
    ///   frame that made the peer's own flush wait, so that the flush went at once.
    private func serveFramesInPlace(_ peer: Peer, maxPayload: Int) -> Allowance? {
        var outcome: Allowance?
        isServingInPlace = true
        defer {
            isServingInPlace = false
            flushOwnQueueIfDeferred()
        }
        _ = accumulator.takeFramesInPlace { type, fields, stop in
            // Checked for every frame, the first included (the caller's check of it is repeated: one check per run):
            // each one after what the frames before it did.
            let allowance = nextFrameAllowance(peer)
            guard case .serve = allowance else {
                outcome = allowance
                return false
            }
            let nameHash = framesSincePrefetch < nameHashes.count ? nameHashes[framesSincePrefetch] : nil
            guard let served = peer.serveInPlace(type: type, fields: fields, maxPayload: maxPayload, nameHash: nameHash)
            else { return false }
            account(served, peer)
            if flushAfterServingInPlace != nil {
                stop = true
                outcome = .serve
            }
            return true
        }
        return outcome
    }

    /// Offers the next whole frame to the peer where it lies in the accumulator (``Peer/serveInPlace``); `nil`
    /// when the peer did not take it (or no whole frame is buffered): then it is still there for `nextRawFrame`.
    private func serveNextFrameInPlace(_ peer: Peer, maxPayload: Int, nameHash: Int?) throws(WireDecodingError) -> Peer.ServedFrame? {
        var served: Peer.ServedFrame?
        isServingInPlace = true
        defer {
            isServingInPlace = false
            flushOwnQueueIfDeferred()
        }
        _ = try accumulator.takeNextFrameInPlace { type, fields in
            served = peer.serveInPlace(type: type, fields: fields, maxPayload: maxPayload, nameHash: nameHash)
            return served != nil
        }
        return served
    }

    /// The peer's own flush, asked while one of its frames was served in place, now that the frame's bytes are no
    /// longer lent out: at once, not at the next tick, so a client that reads everything it posts to itself gets its
    /// batches during a long burst. A read that the flush causes (a failed write) waits for the next turn.
    private func flushOwnQueueIfDeferred() {
        guard let flush = flushAfterServingInPlace.take() else { return }
        isFlushingOwnQueue = true
        flush()
        isFlushingOwnQueue = false
    }

    /// Serves the frames left over at the next turn of the event loop, after it has polled for other
    /// connections' input (see ``NextTurnQueue``), reading nothing new meanwhile.
    private func deferServing() {
        guard !servingDeferred, !isReadingLast, accumulator.bufferedBytes > 0, let context else { return }
        servingDeferred = true
        context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        broker.nextTurn.enqueue { [self] in
            servingDeferred = false
            // A graceful shutdown's last read is under way: serveReceivedFrames serves these with what it reads.
            guard !isReadingLast else { return }
            startTurn()
            guard let peer, peer.isServing else { return }
            serveBufferedFrames(peer)
            closeInputIfPending(peer)
            broker.flushDirtyPeers()
            resumeReadingIfAllowed()
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // The turn's budget starts again with the next read (frames deferred meanwhile are served first).
        if !servingDeferred { startTurn() }
        isCompletingRead = true
        broker.flushDirtyPeers()
        isCompletingRead = false
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            if awaitingIdentity || servingDeferred || isReadingLast || hasFramesWaitingForBackPressure {
                inputClosedPending = true
            } else if let peer {
                inputClosed(peer)
                broker.flushDirtyPeers()
            }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Whole frames wait until the client reads its replies (see ``Peer/isBackPressured``).
    private var hasFramesWaitingForBackPressure: Bool {
        peer?.isBackPressured == true && accumulator.bufferedBytes > 0
    }

    /// Ends the input that closed while frames were still to be served, once they have been.
    private func closeInputIfPending(_ peer: Peer) {
        guard inputClosedPending, !servingDeferred, !hasFramesWaitingForBackPressure else { return }
        inputClosedPending = false
        inputClosed(peer)
    }

    /// The peer finished sending. A partial frame left behind is a protocol violation worth reporting;
    /// otherwise write whatever is still queued for it, then close.
    private func inputClosed(_ peer: Peer) {
        do throws(WireDecodingError) {
            try accumulator.finish()
            peer.closeAfterFlushing()
        } catch {
            peer.fail(error.code, error.description)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        peer?.logger.debug("connection error", metadata: ["error": "\(error)"])
        broker.flushDirtyPeers()
        context.close(promise: nil)
    }

    // MARK: Hand-over

    /// Restores a connection a predecessor handed over: its peer as it was, with its subscriptions, and the start
    /// of a frame it had read. Nothing is read or served until ``startServingHandedOver()``: a post served
    /// before every other handed-over connection is restored would miss their subscriptions.
    private func takeOver(_ record: HandoverSnapshot.PeerRecord, context: ChannelHandlerContext) {
        let peer = Peer(broker: broker, restoring: record, transport: self)
        self.peer = peer
        if record.groups == [record.credentials.gid] {
            // Handed over before its groups were known (or it has none but its primary one): look again, in the
            // background; the connection is served meanwhile with what it had.
            let link = makeLookupLink()
            broker.identities.resolve(
                record.credentials, groupsFound: { groups in link.handler?.peer?.identityFound(groups: groups) },
                commandFound: Self.commandFound(link), isWaiting: Self.isWaiting(link))
        } else if record.command == nil {
            // Handed over before the predecessor's tick read its name.
            let link = makeLookupLink()
            broker.identities.commands.enqueue(
                pid: record.credentials.pid, found: Self.commandFound(link), isWaiting: Self.isWaiting(link))
        }
        if !record.inbound.isEmpty { accumulator.append(ByteBuffer(bytes: record.inbound)) }
        readingPausedForHandover = true
        context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        context.fireChannelActive()
    }

    /// Every handed-over connection is restored: write what the predecessor owed this client, serve the frames it
    /// had read, and read again.
    func startServingHandedOver() {
        guard readingPausedForHandover else { return }
        readingPausedForHandover = false
        broker.flushDirtyPeers()
        if accumulator.bufferedBytes > 0 {
            deferServing()
        } else {
            resumeReadingIfAllowed()
        }
    }

    /// This connection as a hand-over record, or `nil` if it has no peer (it is closing).
    func handoverRecord() -> HandoverSnapshot.PeerRecord? {
        guard let peer, let context else { return nil }
        // The bytes the channel took and has not written yet: the record carries them from where it stopped.
        let unwritten = (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
        return peer.handoverRecord(cookie: cookie, unwrittenInChannel: unwritten, inbound: accumulator.bufferedContents)
    }

    /// Closes the channel once its socket has been handed over: only this process's descriptor closes, so the
    /// client sees nothing, and nothing more is written.
    func closeForHandover() {
        context?.close(promise: nil)
    }

    // MARK: Shutdown

    /// The first step of a graceful shutdown: reads once more, at the loop's next poll, what the client had
    /// written by now, whatever held its reading off (back-pressure, the turn's budget); nothing is served until
    /// ``serveReceivedFrames(atShutdown:)``. A fire-and-forget post still in the socket's buffer is not lost with it.
    func readOnceMore() {
        guard let peer, peer.isServing, !awaitingIdentity, let context else { return }
        isReadingLast = true
        context.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        context.read()
    }

    /// Serves every whole frame already received, whatever the per-turn budget: the first step of a hand-over,
    /// and of a graceful shutdown after ``readOnceMore()``, for every connection before any gets its `GOODBYE`,
    /// so that a post the daemon has taken from its socket reaches every subscriber. Replies stay bounded: once
    /// they exceed the bound again, a hand-over leaves the rest to the successor (in the connection's record), and
    /// a shutdown serves only the posts among the rest (a fire-and-forget post has no answer), leaving other
    /// requests unanswered before the `GOODBYE`, until the replies reach twice the bound (answers to refused or
    /// acknowledged posts). Reading stops. (A peer whose groups are still being looked up has been served nothing
    /// yet and is left so.)
    func serveReceivedFrames(atShutdown: Bool) {
        isReadingLast = false
        if atShutdown { context?.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in } }
        guard let peer, peer.isServing, !awaitingIdentity else { return }
        servingDeferred = false
        peer.ignoreBackPressure()  // what is served now is written before the GOODBYE, within the deadline
        while peer.isServing, accumulator.bufferedBytes > 0 {
            startTurn()
            let before = accumulator.bufferedBytes
            serveBufferedFrames(peer)
            guard accumulator.bufferedBytes == before else { continue }
            // Only a partial frame is left, or the replies are over the bound again.
            if atShutdown, peer.isBackPressured { servePostsOnly(peer) }
            break
        }
        servingDeferred = false
    }

    /// Serves the posts among the whole frames left and drops every other request unanswered, while the replies
    /// queued stay within twice the bound: the end of a shutdown's serving, for a peer whose replies are over it.
    private func servePostsOnly(_ peer: Peer) {
        let maxPayload = Int(broker.configuration.limits.maxPayloadLength)
        let replyLimit = 2 * broker.configuration.outboundByteLimit
        do throws(WireDecodingError) {
            while peer.isServing, peer.queue.pendingBytes <= replyLimit {
                if try serveNextFrameInPlace(peer, maxPayload: maxPayload, nameHash: nil) != nil { continue }
                guard var frame = try accumulator.nextRawFrame() else { break }
                guard frame.type == MessageType.post.rawValue else { continue }
                _ = try peer.serve(type: frame.type, body: &frame.body)
            }
        } catch {
            peer.endServing()
            peer.fail(error.code, error.description)
        }
        peer.endServing()
    }

    /// Sends `GOODBYE` after what is queued (see ``Peer/beginShutdown()``).
    ///
    /// - Returns: a future that completes when the channel has closed.
    func beginShutdown() -> EventLoopFuture<Void> {
        guard let context else { return broker.eventLoop.makeSucceededVoidFuture() }
        peer?.beginShutdown()
        return context.channel.closeFuture
    }

    // MARK: PeerTransport

    func write(_ bytes: ByteBuffer) {
        context?.write(wrapOutboundOut(bytes), promise: nil)
    }

    func flush() {
        context?.flush()
    }

    func whenWritten(_ body: @escaping () -> Void) {
        guard let context else { return }
        // An empty write behind the others completes once everything before it is written.
        let barrier = context.eventLoop.makePromise(of: Void.self)
        barrier.futureResult.assumeIsolated().whenComplete { _ in body() }
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0)), promise: barrier)
    }

    var mustNotBeWrittenNow: Bool { isCompletingRead || isServingInPlace }

    func flushWhenWritable(_ flush: @escaping () -> Void) {
        if isServingInPlace, !isCompletingRead {
            flushAfterServingInPlace = flush
            return
        }
        guard !isFlushScheduled, let context else { return }
        isFlushScheduled = true
        context.eventLoop.assumeIsolated().execute { [self] in
            isFlushScheduled = false
            flush()
        }
    }

    func stopReadingForBackPressure() {
        guard !isReadingLast else { return }  // the last read goes on: nothing more is served until it is over
        context?.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
    }

    func backPressureRelieved() {
        // Frames left unserved while paused are served at the next turn (never from inside a write's
        // completion, which can run while another connection's frames are being served).
        guard !readingPausedForHandover else { return }  // startServingHandedOver() serves them
        if accumulator.bufferedBytes > 0, !awaitingIdentity {
            deferServing()
        } else {
            resumeReadingIfAllowed()
        }
    }

    func close() {
        guard let context else { return }
        // At the next tick, never inside one of this channel's own events: a peer can be flushed and closed from
        // its channel's read completion on EOF, after which NIO goes on to close the channel's input itself (and
        // asserts that the channel is still registered).
        context.eventLoop.assumeIsolated().execute { context.close(promise: nil) }
    }
}
