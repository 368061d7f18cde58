import Logging
import NIOCore
import NIOPosix
import NotifyWire

/// The daemon's centre: assigns sequence numbers, fans posts out to the delivery queues of the peers whose
/// subscriptions match, and schedules their flushes. Lives on the server's single event loop, so it needs no
/// locks.
///
/// A post flows one way: the peer's channel handler decodes it, its ``Peer`` checks it and hands it here, the
/// broker offers it to each recipient's ``DeliveryQueue`` and acts on the answer, and the touched peers are
/// flushed to their channels once per read burst.
final class Broker {
    let eventLoop: EventLoop
    let configuration: ServerConfiguration
    let instanceID: InstanceID
    let daemonPID: UInt32
    let logger: Logger
    private(set) var access: AccessControl
    let accounts: UserAccounts
    let index = SubscriberIndex()
    /// The subscriptions with the states flag: who is sent `STATE_CHANGED` for a name (see `Broker+States.swift`).
    /// An index of its own, so a `SET_STATE` visits only its watchers and a post never sees them.
    let stateWatchers = SubscriberIndex()
    var store = StateStore()
    /// Finds new peers' groups and command names off the event loop.
    let identities: PeerIdentityResolver
    /// Where connections that used up a turn's budget continue, one slice each per poll of the loop.
    let nextTurn: NextTurnQueue
    let startTime = NIODeadline.now()
    private let allocator = ByteBufferAllocator()

    /// Open peers by connection number.
    private(set) var peers: [UInt64: Peer] = [:]
    /// The last connection number given out (set by a hand-over's restore too).
    var nextConnectionNumber: UInt64 = 0
    /// The sequence number of the last accepted post (set by a hand-over's restore too).
    var lastSequence: UInt64 = 0
    var statistics = ServerStatistics()
    /// The metrics a scrape exports (see ``DaemonMetrics``).
    let metrics = DaemonMetrics()
    /// Rates, memory and reloads, for `status` (see `Broker+Introspection.swift`).
    var samples = StatusSamples()

    /// The broker's state for each peer, indexed by ``Peer/slot``.
    private var slots = PeerSlots()
    private var routeMark: UInt64 = 0
    /// Not `lazy`: a lazy property's accessors copy the struct, and the copy would make every append to the
    /// run's buffer copy the whole buffer.
    private var run: PostRun
    /// Recipients of a single post, reused from post to post.
    private var recipients: [Recipient] = []
    /// Peers with bytes appended since their last flush.
    private var dirty: [Peer] = []
    /// Set while a post or a run is handed out. A flush inside it can make NIO read another peer's input (a write
    /// that fails is followed by reading what the peer sent before it went): that peer's handler keeps those
    /// frames for the next turn rather than re-enter the broker mid-fan-out.
    private(set) var isRouting = false
    /// Peers holding notifications (see `Broker+Holding.swift`).
    var holding: [UInt64: Peer] = [:]

    init(
        eventLoop: EventLoop, configuration: ServerConfiguration, instanceID: InstanceID, daemonPID: UInt32,
        logger: Logger, identityPool: NIOThreadPool? = nil
    ) {
        self.identities = PeerIdentityResolver(
            eventLoop: eventLoop, pool: identityPool, lookup: configuration.identityLookup)
        self.eventLoop = eventLoop
        self.nextTurn = NextTurnQueue(eventLoop: eventLoop)
        self.configuration = configuration
        self.instanceID = instanceID
        self.daemonPID = daemonPID
        self.logger = logger
        self.access = AccessControl(configuration: configuration.access)
        self.accounts = UserAccounts(quotas: configuration.access.quotas)
        self.run = PostRun(allocator: allocator)
    }

    /// Replaces the access rules and quotas (configuration reload); existing subscriptions are kept.
    func updateAccess(_ configuration: AccessConfiguration) {
        access = AccessControl(configuration: configuration)
        accounts.quotas = configuration.quotas
        index.invalidateRoutes()
    }

    /// The exact subscribers of `name`, if any (a post looks its name up once: the peer's checks and the
    /// fan-out share this answer).
    @inline(__always)
    func exactSubscribers(of name: String) -> SubscriberIndex.Subscribers? { index.exactSubscribers(of: name) }

    /// What matching has cost so far (a wrapping count of pattern trie nodes visited and store entries scanned),
    /// charged to the connection whose frame caused it.
    var matchingWork: Int {
        index.patternNodesVisited &+ stateWatchers.patternNodesVisited &+ store.entriesScanned
    }

    // MARK: Peers

    /// Adds a peer that just connected, or one a predecessor handed over with its number; returns its connection
    /// number and its slot.
    func register(_ peer: Peer, restoredNumber: UInt64? = nil) -> (number: UInt64, slot: Int) {
        let number: UInt64
        if let restoredNumber {
            number = restoredNumber
            nextConnectionNumber = max(nextConnectionNumber, restoredNumber)
        } else {
            nextConnectionNumber += 1
            number = nextConnectionNumber
            statistics.connectionsAccepted += 1
        }
        peers[number] = peer
        return (number, slots.allocate())
    }

    /// Forgets a peer that closed (it has removed its subscriptions already).
    func unregister(_ peer: Peer) {
        guard peers.removeValue(forKey: peer.number) != nil else { return }
        holding.removeValue(forKey: peer.number)
        // Parked routes may list the closed peer: drop them all rather than keep it alive until each of their
        // posters posts again. Closes are rare next to posts, and only posters park routes.
        slots.dropParkedRoutes()
        slots.free(peer.slot)
    }

    /// How many peers hold a parked route (for tests: it must stay within the number of posters).
    var parkedPosterCount: Int { slots.parkedCount }

    // MARK: Routing

    /// Collects every peer with a subscription matching `name` that may observe it into `recipients`, once per
    /// peer under its strongest matching subscription; with `mergingMarks` (a post made with retain only), a peer
    /// marks retained posts if any of its matching subscriptions does.
    @inline(__always)
    private func collectRecipients(
        of name: String, exactSubscribers: SubscriberIndex.Subscribers?, poster: Peer?, in index: SubscriberIndex,
        mergingMarks: Bool = false, into recipients: inout [Recipient]
    ) {
        routeMark &+= 1
        let mark = routeMark
        // A poster that asked not to receive its own posts (HELLO's no-echo flag) is passed over.
        let excluded = poster.flatMap { $0.excludesOwnPosts ? $0 : nil }
        let restriction = observeRestriction(of: name)
        index.forEachMatch(name: name, exactSubscribers: exactSubscribers) { subscriber in
            if let excluded, subscriber.peer === excluded { return }
            let slot = subscriber.peer.slot
            if slots[slot].mark == mark {
                let position = slots[slot].position
                guard position >= 0 else { return }
                if mergingMarks {
                    // A marking subscription wins over a non-marking one, whatever their policies.
                    let marks = recipients[position].marksRetained || subscriber.marksRetained
                    if recipients[position].isWeaker(than: subscriber) { recipients[position] = subscriber }
                    recipients[position].marksRetained = marks
                } else if recipients[position].isWeaker(than: subscriber) {
                    recipients[position] = subscriber
                }
                return
            }
            slots[slot].mark = mark
            if let restriction, !access.mayObserve(restriction, subscriber.peer.identity) {
                slots[slot].position = -1
                return
            }
            slots[slot].position = recipients.count
            recipients.append(subscriber)
        }
    }

    /// The rule that decides who may observe `name`, unless it lets everyone (then, and with no rule, nobody is
    /// filtered out).
    private func observeRestriction(of name: String) -> AccessConfiguration.PrefixRule? {
        guard access.mayBeRestricted(name), let rule = access.rule(for: name), rule.observe != .all else { return nil }
        return rule
    }

    /// Assigns the next sequence number and offers one shared encoding of the notification to every recipient.
    /// Ends any open run first.
    ///
    /// - Returns: the sequence number and the number of peers it was queued or held for.
    /// - Parameter exactSubscribers: the index's exact subscribers of `name`, looked up once per post.
    /// - Parameter origin: a relayed post's origin: recipients that asked for origins get a second encoding that
    ///   carries it (PROTOCOL.md § 16), made only if one of them matches.
    /// - Parameter retain: keep it as `name`'s retained notification (with its origin), and send it as
    ///   `RETAINED(0)` to recipients whose matching subscriptions mark retained posts (see
    ///   `Broker+Retained.swift`); only such a post looks at the marks.
    func post(
        name: String, payload: ByteBuffer, sender: SenderCredentials, origin: RelayOrigin? = nil, retain: Bool,
        exactSubscribers: SubscriberIndex.Subscribers?, poster: Peer? = nil
    ) -> (sequence: UInt64, delivered: UInt32) {
        endRun()
        lastSequence &+= 1
        statistics.posts += 1
        let sequence = lastSequence
        if retain {
            store.retain(
                name: name, payload: payload, sender: sender, origin: origin, sequence: sequence, accounts: accounts)
            collectRecipients(
                of: name, exactSubscribers: exactSubscribers, poster: poster, in: index, mergingMarks: true,
                into: &recipients)
        } else {
            collectRecipients(
                of: name, exactSubscribers: exactSubscribers, poster: poster, in: index, into: &recipients)
        }
        guard !recipients.isEmpty else { return (sequence, 0) }
        var frame = allocator.buffer(
            capacity: NotificationFrame.encodedLength(
                nameByteCount: name.utf8.count, payloadByteCount: payload.readableBytes))
        NotificationFrame.encode(sequence: sequence, sender: sender, name: name, payload: payload, into: &frame)
        var withOrigin: ByteBuffer?
        if let origin, recipients.contains(where: { $0.peer.acceptsOrigins }) {
            var copy = frame
            origin.append(toFrameAt: copy.readerIndex, in: &copy)
            withOrigin = copy
        }
        var delivered: UInt32 = 0
        isRouting = true
        if retain {
            var marked = MarkedRetainedPost(
                notification: NotificationFrame(
                    sequence: sequence, sender: sender, name: name, payload: payload, origin: origin))
            for recipient in recipients {
                let withOrigins = withOrigin != nil && recipient.peer.acceptsOrigins
                if recipient.marksRetained {
                    if queueMarkedRetained(&marked, withOrigin: withOrigins, to: recipient.peer) { delivered += 1 }
                } else if offer(withOrigins ? withOrigin! : frame, name: name, sequence: sequence, to: recipient) {
                    delivered += 1
                }
            }
        } else {
            for recipient in recipients {
                let encoding = withOrigin != nil && recipient.peer.acceptsOrigins ? withOrigin! : frame
                if offer(encoding, name: name, sequence: sequence, to: recipient) { delivered += 1 }
            }
        }
        isRouting = false
        recipients.removeAll(keepingCapacity: true)
        statistics.deliveries += UInt64(delivered)
        return (sequence, delivered)
    }

    /// Calls `body` once for each peer watching `name`'s state value (``stateWatchers``) that may observe it,
    /// passing over `setter` if it asked for no echo: the same rules as a post's recipients.
    func forEachStateWatcher(of name: String, setter: Peer, _ body: (Peer) -> Void) {
        collectRecipients(
            of: name, exactSubscribers: stateWatchers.exactSubscribers(of: name), poster: setter, in: stateWatchers,
            into: &recipients)
        guard !recipients.isEmpty else { return }
        // As for a post: a flush inside can make NIO read another peer's input, which must wait.
        isRouting = true
        for recipient in recipients { body(recipient.peer) }
        isRouting = false
        recipients.removeAll(keepingCapacity: true)
    }

    /// Offers one notification to `recipient`'s queue and acts on the answer.
    ///
    /// - Returns: whether it was queued or held.
    private func offer(_ frame: ByteBuffer, name: String, sequence: UInt64, to recipient: Recipient) -> Bool {
        let peer = recipient.peer
        guard peer.isOpen else { return false }
        let offer = peer.queue.offer(
            frame, name: name, sequence: sequence, policy: recipient.policy, subscriptionID: recipient.subscriptionID)
        switch offer {
        case .queued(let flushNow):
            flushNow ? flush(peer) : markDirty(peer)
        case .held(let held):
            tally(held, for: peer)
        case .slowConsumer(let subscriptionID):
            statistics.slowConsumerDisconnects += 1
            peer.disconnectSlowConsumer(subscriptionID: subscriptionID)
            return false
        }
        return true
    }

    private func tally(_ held: DeliveryQueue.Held, for peer: Peer) {
        statistics.merged += held.merged
        statistics.dropped += held.dropped
        if held.startedHolding {
            holding[peer.number] = peer
            peer.noteHolding()
        }
    }

    // MARK: Runs of posts

    /// Posts a notification that wants no reply and retains nothing, as part of a run of posts by `poster` to
    /// `name` (see ``PostRun``): continues the open run or ends it and opens a new one.
    func postInRun(name: String, payload: ByteBuffer, from poster: Peer, exactSubscribers: SubscriberIndex.Subscribers?) {
        if run.poster !== poster || ExactName(run.name) != ExactName(name) {
            openRun(name: name, by: poster, exactSubscribers: exactSubscribers)
        }
        payload.withUnsafeReadableBytes { appendToRun($0) }
    }

    /// Starts loading what routing the posts among the next `count` frames buffered will read (see
    /// ``SubscriberIndex/prefetchExactNames(into:_:)``); `hashes` gets each frame's name hash, or `nil`.
    func prefetchRoutes(of frames: FrameAccumulator<ClientFrame>, count: Int, hashes: inout [Int?]) {
        index.prefetchExactNames(into: &hashes) { each in
            frames.forEachBufferedFrame(limit: count) { type, fields in
                guard type == MessageType.post.rawValue, let post = ClientFrame.PostFields(fields: fields) else {
                    each(nil)
                    return
                }
                each(UnsafeRawBufferPointer(rebasing: post.nameField.dropFirst(2)))
            }
        }
    }

    /// How ``postFromBytes(_:by:nameHash:)`` served a post.
    enum PostFromBytes {
        /// Encoded straight into its name's one subscriber's queue (``deliverAlone(_:name:entry:to:from:)``).
        case alone
        /// It opened a run.
        case run
    }

    /// Serves the plain `POST` `post` (flags 0, a payload within the limit, read in place) from its bytes, if it is
    /// to a name with exact subscribers that `poster` may post under: alone to the name's one subscriber, or as the
    /// first post of a run. The name is found from the frame's bytes, with no `String`
    /// built: a poster spreading its posts over many names pays one table lookup per post. Such a post needs no
    /// other check: having exact subscribers proves the name's grammar, and the rest is what ``Peer``'s full path
    /// checks.
    ///
    /// - Parameter nameHash: the name's hash, if the caller has it (``prefetchRoutes(of:count:hashes:)``).
    /// - Returns: how it was served; `nil` when the post needs the full path (nothing was done).
    func postFromBytes(_ post: ClientFrame.PostFields, by poster: Peer, nameHash: Int?) -> PostFromBytes? {
        guard
            let (name, subscribers, entry) = index.exactEntry(
                named: UnsafeRawBufferPointer(rebasing: post.nameField.dropFirst(2)), hash: nameHash),
            access.checkPost(name, by: poster.identity, action: "post") == nil
        else { return nil }
        if case .one(let subscriber) = subscribers,
            deliverAlone(post, name: name, entry: entry, to: subscriber, from: poster)
        {
            return .alone
        }
        openRun(name: name, by: poster, exactSubscribers: subscribers)
        appendToRun(post.payload)
        return .run
    }

    /// The last post ``deliverAlone(_:name:entry:to:from:)`` delivered: its poster, its name's entry in the index,
    /// and the index's generation. Other posts do not clear it and a closed poster's identifier can come back, so
    /// "the second post in a row" is approximate: that only ever chooses between two correct paths.
    private var lastAlone: (poster: ObjectIdentifier, entry: Int, generation: UInt64)?
    /// Posts ``deliverAlone(_:name:entry:to:from:)`` delivered so far.
    private(set) var postsServedAlone = 0

    /// Delivers a plain post whose name has one exact subscriber, which no pattern or access rule adds to or takes
    /// from for this name, straight into that subscriber's queue: no run is opened, closed and parked for a post
    /// that is usually alone (a poster spreading its posts over names). The second post in a row to the same name
    /// starts a run instead, so a burst keeps the run's cheaper path.
    ///
    /// - Returns: `false` when the post needs a run (nothing was done but ending the open run).
    private func deliverAlone(
        _ post: ClientFrame.PostFields, name: String, entry: Int, to subscriber: Subscriber, from poster: Peer
    ) -> Bool {
        // The open run goes first: its flushes can close peers, this subscriber among them.
        endRun()
        let this = (poster: ObjectIdentifier(poster), entry: entry, generation: index.generation)
        if let lastAlone, lastAlone == this {
            self.lastAlone = nil
            return false
        }
        let peer = subscriber.peer
        guard peer.isOpen, !(peer === poster && poster.excludesOwnPosts), isAlone(peer, recipientOf: name) else {
            return false
        }
        let sequence = lastSequence &+ 1
        let size = NotificationFrame.encodedLength(nameByteCount: post.nameField.count - 2, payloadByteCount: post.payload.count)
        let sender = poster.credentials
        guard
            let flushNow = peer.queue.encodeIfRoom(size: size, { buffer in
                NotificationFrame.RunEncoder.encodeFrame(
                    sequence: sequence, pid: sender.pid, uid: sender.uid, gid: sender.gid, nameField: post.nameField,
                    payload: post.payload, into: &buffer)
            })
        else { return false }
        lastSequence = sequence
        statistics.posts += 1
        statistics.deliveries += 1
        lastAlone = this
        postsServedAlone += 1
        // As for a run: a flush inside can make NIO read another peer's input, which must wait.
        isRouting = true
        flushNow ? flush(peer) : markDirty(peer)
        isRouting = false
        return true
    }

    /// Whether `peer`, the one exact subscriber of `name`, is all its recipients: no pattern matches the name, and the
    /// access rules let the peer observe it (as ``collectRecipients(of:exactSubscribers:poster:in:mergingMarks:into:)``
    /// decides).
    private func isAlone(_ peer: Peer, recipientOf name: String) -> Bool {
        if index.hasPatternMatch(name) { return false }
        guard let restriction = observeRestriction(of: name) else { return true }
        return access.mayObserve(restriction, peer.identity)
    }

    private func openRun(name: String, by poster: Peer, exactSubscribers: SubscriberIndex.Subscribers?) {
        endRun()
        run.open(poster: poster, name: name, generation: index.generation, reusing: slots[poster.slot].parked.take())
        collectRecipients(of: name, exactSubscribers: exactSubscribers, poster: poster, in: index, into: &run.recipients)
    }

    /// Adds the plain `POST` `post` (flags 0, a payload within the limit, read in place) to `poster`'s open run, if it
    /// continues it: the run's name byte for byte. Such a post needs no other check: the first post of the run
    /// passed them all.
    ///
    /// A post from `poster` when no run of its is open may resume the route it parked (see ``PostRun``).
    ///
    /// - Returns: `false` when the post does not continue the run (nothing was done).
    func appendToRun(_ post: ClientFrame.PostFields, ifContinuedBy poster: Peer) -> Bool {
        if run.poster === poster {
            guard run.isContinued(by: post) else { return false }
            appendToRun(post.payload)
            return true
        }
        // The parked route is resumed only for a post it continues: resuming it to find another name would close
        // and park it again, for every post of a poster spreading its posts over names.
        guard slots.parkedRoute(in: poster.slot, continuedBy: post.nameField, generation: index.generation) else {
            return false
        }
        endRun()
        run.resume(poster, slots[poster.slot].parked.take()!)
        appendToRun(post.payload)
        return true
    }

    /// Adds one post to the open run: a sequence number, and the encoded frame if anyone receives it.
    private func appendToRun(_ payload: UnsafeRawBufferPointer) {
        lastSequence &+= 1
        statistics.posts += 1
        guard !run.recipients.isEmpty else { return }
        run.append(sequence: lastSequence, payload: payload)
        if run.encoded.readableBytes >= PostRun.byteLimit { deliverRun() }
    }

    /// Hands the open run to its recipients and closes it (nothing to do when no run is open).
    func endRun() {
        guard run.isOpen else { return }
        deliverRun()
        // A poster closed meanwhile has given its slot back: its route must not land in another peer's slot.
        guard let (poster, route) = run.close(currentGeneration: index.generation), poster.phase != .closed else {
            return
        }
        slots.park(route, in: poster.slot)
    }

    private func deliverRun() {
        guard !run.frames.isEmpty else { return }
        var delivered = 0
        let count = run.frames.count
        isRouting = true
        defer { isRouting = false }
        // In a scope of its own: the run's storage must have no other owner once delivered, so that
        // `clearFrames` reuses it when no recipient kept it.
        do {
            let shared = run.sharedBytes(recipientCount: run.recipients.count)
            let bytes = shared ?? run.encoded
            deliver(bytes, sharingStorage: shared != nil, frameCount: count, delivered: &delivered)
        }
        statistics.deliveries += UInt64(delivered)
        run.clearFrames()
    }

    /// Offers the open run's frames, `bytes` (shared by the recipients or copied by each), to every recipient.
    private func deliver(_ bytes: ByteBuffer, sharingStorage: Bool, frameCount count: Int, delivered: inout Int) {
        for recipient in run.recipients {
            let peer = recipient.peer
            guard peer.isOpen else { continue }
            if let flushNow = peer.queue.queueIfRoom(bytes, sharingStorage: sharingStorage) {
                flushNow ? flush(peer) : markDirty(peer)
                delivered += count
            } else if let (flushNow, held) = peer.queue.offerRun(
                run, policy: recipient.policy, subscriptionID: recipient.subscriptionID)
            {
                tally(held, for: peer)
                flushNow ? flush(peer) : markDirty(peer)
                delivered += count
            } else {
                for frame in run.frames where peer.isOpen {
                    if offer(run.slice(frame), name: run.name, sequence: frame.sequence, to: recipient) { delivered += 1 }
                }
            }
        }
    }

    // MARK: Flushing

    /// Notes that `peer` has bytes to flush at the end of the read burst.
    func markDirty(_ peer: Peer) {
        guard !slots[peer.slot].isDirty else { return }
        slots[peer.slot].isDirty = true
        dirty.append(peer)
    }

    /// Flushes `peer` now (enough is queued that it should not wait for the end of the burst).
    func flush(_ peer: Peer) {
        slots[peer.slot].isDirty = false
        peer.flush()
    }

    /// Hands every touched peer's bytes to its channel: one flush per peer per burst.
    func flushDirtyPeers() {
        guard !dirty.isEmpty else { return }
        // A flush may close a peer synchronously (and so touch `dirty`): iterate a swapped-out list, then hand
        // its storage back so steady-state flushing allocates nothing here.
        var touched: [Peer] = []
        swap(&touched, &dirty)
        // A closed peer's slot may belong to another peer by now: check the phase first.
        for peer in touched where peer.phase != .closed && slots[peer.slot].isDirty {
            flush(peer)
        }
        touched.removeAll(keepingCapacity: true)
        if dirty.isEmpty { dirty = touched }
    }

}
