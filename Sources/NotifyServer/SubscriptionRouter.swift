#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import FoundationEssentials
import Logging
import NIOCore
import NIOPosix
import NotifyWire

/// The subscriber tables, the state and retained stores, and the fan-out of posts. Lives on the server's
/// single event loop, so it needs no locks: every connection handler calls it from that loop.
final class SubscriptionRouter {
    /// The connections subscribed to one exact name, each once however many of its subscriptions name it.
    ///
    /// Most names have a single subscriber, kept inline: no list object and no array per name (memory per
    /// subscription is one of the daemon's targets).
    enum Subscribers {
        case one(ClientConnection)
        case many(SubscriberList)

        var count: Int {
            switch self {
            case .one: 1
            case .many(let list): list.connections.count
            }
        }

        @inline(__always)
        func forEach(_ body: (ClientConnection) -> Void) {
            switch self {
            case .one(let connection): body(connection)
            case .many(let list): for connection in list.connections { body(connection) }
            }
        }
    }

    /// The subscribers of a name with more than one, updated in place.
    final class SubscriberList {
        var connections: [ClientConnection]

        init(_ connections: [ClientConnection]) { self.connections = connections }
    }

    /// The last notification posted with `retain` on a name.
    struct RetainedNotification {
        var sequence: UInt64
        var sender: SenderCredentials
        var payload: ByteBuffer
        var ownerUID: UInt32
    }

    let eventLoop: EventLoop
    let configuration: ServerConfiguration
    let instanceID: InstanceID
    let daemonPID: UInt32
    let logger: Logger
    private(set) var access: AccessControl
    private let allocator = ByteBufferAllocator()
    private let startTime = NIODeadline.now()

    private var exact: [ExactName: Subscribers] = [:]
    private let patterns = PatternTrie()

    /// Pattern trie nodes visited by matches so far: the routing work a connection's frames cost (see
    /// ``ClientConnection/patternVisitsPerTurn``).
    var patternNodesVisited: Int { patterns.nodesVisited }
    /// Pattern trie nodes: what all patterns cost in memory, and the most one match can visit.
    var patternNodeCount: Int { patterns.nodeCount }
    private(set) var connections: [ObjectIdentifier: ClientConnection] = [:]
    private var accounts: [UInt32: UIDAccount] = [:]
    /// Connections with bytes appended since their last flush.
    private var dirty: [ClientConnection] = []
    private var nextConnectionNumber: UInt64 = 0
    private var states: [ExactName: (value: UInt64, ownerUID: UInt32)] = [:]
    private var retained: [ExactName: RetainedNotification] = [:]
    private var rateSamples: [(time: NIODeadline, posts: UInt64, deliveries: UInt64)] = []

    /// The sequence number of the last accepted post.
    private(set) var lastSequence: UInt64 = 0
    var statistics = ServerStatistics()

    /// Finds new connections' groups and command names off the event loop.
    let identities: PeerIdentityResolver

    init(
        eventLoop: EventLoop, configuration: ServerConfiguration, instanceID: InstanceID, daemonPID: UInt32,
        logger: Logger, identityPool: NIOThreadPool? = nil
    ) {
        self.identities = PeerIdentityResolver(
            eventLoop: eventLoop, pool: identityPool, lookup: configuration.identityLookup)
        self.eventLoop = eventLoop
        self.configuration = configuration
        self.instanceID = instanceID
        self.daemonPID = daemonPID
        self.logger = logger
        self.access = AccessControl(configuration: configuration.access)
        self.run = PostRun(allocator: allocator)
    }

    var nameCount: Int { exact.count }

    /// The per-user quotas in force (they change with a configuration reload).
    var quotas: AccessConfiguration.Quotas { access.configuration.quotas }

    /// Replaces the access rules and quotas (configuration reload); existing subscriptions are kept.
    func updateAccess(_ configuration: AccessConfiguration) {
        access = AccessControl(configuration: configuration)
        routingChanged()
    }

    // MARK: Connections and accounts

    func account(for uid: UInt32) -> UIDAccount {
        if let account = accounts[uid] { return account }
        let account = UIDAccount(uid: uid)
        accounts[uid] = account
        return account
    }

    func register(_ connection: ClientConnection) -> UInt64 {
        nextConnectionNumber += 1
        connections[ObjectIdentifier(connection)] = connection
        statistics.connectionsAccepted += 1
        return nextConnectionNumber
    }

    func unregister(_ connection: ClientConnection) {
        guard connections.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return }
        holding.removeValue(forKey: ObjectIdentifier(connection))
        connection.releaseSubscriptions()
        // Parked routes may list the closed connection: drop them all rather than keep it alive until each of
        // their posters posts again. Closes are rare next to posts, and only posters park routes.
        for poster in parkedPosters {
            poster.parkedRoute = nil
            poster.isListedAsParked = false
        }
        parkedPosters.removeAll(keepingCapacity: true)
        routingChanged()
    }

    // MARK: Subscriptions

    /// Adds `connection` to the subscribers of exactly `name`, once per name and connection.
    ///
    /// - Returns: `false` if it already was one (another of its subscriptions names `name`).
    func addSubscriber(_ connection: ClientConnection, to name: String) -> Bool {
        routingChanged()
        let key = ExactName(name)
        switch exact[key] {
        case nil:
            exact[key] = .one(connection)
        case .one(let other):
            if other === connection { return false }
            exact[key] = .many(SubscriberList([other, connection]))
        case .many(let list):
            if list.connections.contains(where: { $0 === connection }) { return false }
            list.connections.append(connection)
        }
        return true
    }

    func removeSubscriber(_ connection: ClientConnection, from name: String) {
        routingChanged()
        let key = ExactName(name)
        switch exact[key] {
        case nil:
            return
        case .one(let other):
            if other === connection { exact.removeValue(forKey: key) }
        case .many(let list):
            guard let index = list.connections.firstIndex(where: { $0 === connection }) else { return }
            list.connections.swapAt(index, list.connections.count - 1)
            list.connections.removeLast()
            if list.connections.count == 1 { exact[key] = .one(list.connections[0]) }
        }
    }

    func addPattern(_ pattern: NotificationPattern, for connection: ClientConnection) {
        routingChanged()
        patterns.insert(pattern, connection)
    }

    func removePattern(_ pattern: NotificationPattern, for connection: ClientConnection) {
        routingChanged()
        patterns.remove(pattern, connection)
    }

    /// Outdates every parked route (see ``PostRun/ParkedRoute``): called by each change that could change
    /// who receives a name or whether a poster may post to it.
    private func routingChanged() {
        routingGeneration &+= 1
    }

    /// The exact subscribers of `name`, if any; having them also proves it passed the name grammar when it
    /// was subscribed.
    func exactSubscribers(of name: String) -> Subscribers? { exact[ExactName(name)] }

    // MARK: Posting

    /// Marks the connections already chosen for the post or run being routed, so a connection with several
    /// matching subscriptions receives each notification once.
    private var routeMark: UInt64 = 0
    /// Not `lazy`: a lazy property's accessors copy the struct, and the copy would make every append to the
    /// run's buffer copy the whole buffer.
    private var run: PostRun
    /// Counts the changes that outdate parked routes.
    private var routingGeneration: UInt64 = 0
    /// The connections holding a parked route, each once (``ClientConnection/isListedAsParked``).
    private var parkedPosters: [ClientConnection] = []

    /// How many connections hold a parked route (for tests: it must stay within the number of posters).
    var parkedPosterCount: Int { parkedPosters.count }

    /// Calls `body` once for every connection with a subscription matching `name` that may observe it.
    private func forEachRecipient(
        of name: String, exactSubscribers: Subscribers?, _ body: (ClientConnection) -> Void
    ) {
        routeMark &+= 1
        let mark = routeMark
        let rule = access.mayBeRestricted(name) ? access.rule(for: name) : nil
        let restricted = rule.map { $0.observe != .all } ?? false
        func offer(_ connection: ClientConnection) {
            guard connection.routeMark != mark else { return }
            connection.routeMark = mark
            if restricted, !access.mayObserve(rule!, connection.peer) { return }
            body(connection)
        }
        exactSubscribers?.forEach(offer)
        if patterns.count > 0 {
            patterns.forEachMatch(name: name, offer)
        }
    }

    /// Assigns the next sequence number and queues one shared encoding of the notification to every connection
    /// with a matching subscription that may observe it, once per connection. Ends any open run first.
    ///
    /// - Returns: the sequence number and the number of connections it was queued or held for.
    /// - Parameter exactSubscribers: the caller's ``exactSubscribers(of:)`` for `name`, looked up once per post.
    func post(
        name: String, payload: ByteBuffer, sender: SenderCredentials, retain: Bool, exactSubscribers: Subscribers?
    ) -> (sequence: UInt64, delivered: UInt32) {
        endRun()
        lastSequence &+= 1
        statistics.posts += 1
        let sequence = lastSequence
        if retain { storeRetained(name: name, payload: payload, sender: sender, sequence: sequence) }

        var frame: ByteBuffer?
        var delivered: UInt32 = 0
        forEachRecipient(of: name, exactSubscribers: exactSubscribers) { connection in
            if frame == nil {
                var encoded = allocator.buffer(
                    capacity: NotificationFrame.encodedLength(
                        nameByteCount: name.utf8.count, payloadByteCount: payload.readableBytes))
                NotificationFrame.encode(sequence: sequence, sender: sender, name: name, payload: payload, into: &encoded)
                frame = encoded
            }
            if connection.deliver(frame!, name: name, sequence: sequence) { delivered += 1 }
        }
        statistics.deliveries += UInt64(delivered)
        return (sequence, delivered)
    }

    // MARK: Runs of posts

    /// Posts a notification that wants no reply and retains nothing, as part of a run of posts by `poster` to
    /// `name` (see ``PostRun``): continues the open run or ends it and opens a new one.
    func postInRun(name: String, payload: ByteBuffer, from poster: ClientConnection, exactSubscribers: Subscribers?) {
        if run.poster !== poster || ExactName(run.name) != ExactName(name) {
            endRun()
            run.open(poster: poster, name: name, generation: routingGeneration)
            forEachRecipient(of: name, exactSubscribers: exactSubscribers) { run.recipients.append($0) }
        }
        payload.withUnsafeReadableBytes { appendToRun($0) }
    }

    /// Adds the `POST` whose fields are `body` to `poster`'s open run, if it continues it: flags 0, the run's
    /// name byte for byte, a payload within `maxPayload`. Such a post needs no other check: the first post of
    /// the run passed them all.
    ///
    /// A post from `poster` when no run of its is open may resume the route it parked (see ``PostRun``).
    ///
    /// - Returns: `false` when the post does not continue the run (nothing was done).
    func appendToRun(ifContinuedBy poster: ClientConnection, body: ByteBuffer, maxPayload: Int) -> Bool {
        if run.poster !== poster {
            guard poster.parkedRoute != nil else { return false }
            endRun()
            guard run.resume(poster, generation: routingGeneration) else { return false }
        }
        return body.withUnsafeReadableBytes { fields in
            guard let payload = run.continuingPayload(fields, maxPayload: maxPayload) else { return false }
            appendToRun(payload)
            return true
        }
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
        // A poster resumes and re-parks its route once per read: list it once, not once per park.
        if let poster = run.close(currentGeneration: routingGeneration), !poster.isListedAsParked {
            poster.isListedAsParked = true
            parkedPosters.append(poster)
        }
    }

    private func deliverRun() {
        guard !run.frames.isEmpty else { return }
        var delivered = 0
        let count = run.frames.count
        for connection in run.recipients {
            delivered += connection.queueIfRoom(run.encoded) ? count : connection.deliver(run: run)
        }
        statistics.deliveries += UInt64(delivered)
        run.frames.removeAll(keepingCapacity: true)
        run.encoded.clear()
    }

    // MARK: State and retained notifications

    /// Whether storing a retained payload of `size` bytes for `uid` stays within its quota.
    func mayRetain(_ size: Int, name: String, uid: UInt32) -> Bool {
        let account = account(for: uid)
        if account.isExempt { return true }
        let replaced = retained[ExactName(name)].map { $0.ownerUID == uid ? $0.payload.readableBytes : 0 } ?? 0
        return account.retainedBytes - replaced + size <= quotas.retainedBytesPerUID
    }

    private func storeRetained(name: String, payload: ByteBuffer, sender: SenderCredentials, sequence: UInt64) {
        if let previous = retained[ExactName(name)] { account(for: previous.ownerUID).retainedBytes -= previous.payload.readableBytes }
        // Own copy: the decoded payload is a slice of the connection's read buffer.
        var copy = allocator.buffer(capacity: payload.readableBytes)
        copy.writeImmutableBuffer(payload)
        retained[ExactName(name)] = RetainedNotification(sequence: sequence, sender: sender, payload: copy, ownerUID: sender.uid)
        account(for: sender.uid).retainedBytes += payload.readableBytes
    }

    /// The retained notifications of every name `pattern` matches, oldest first, that `peer` may observe.
    func retainedNotifications(matching pattern: NotificationPattern, for peer: AccessControl.Peer) -> [NotificationFrame] {
        let matches: [(String, RetainedNotification)]
        if pattern.hasWildcards {
            matches = retained.filter { pattern.matches($0.key.string) }.map { ($0.key.string, $0.value) }
        } else {
            matches = retained[ExactName(pattern.text)].map { [(pattern.text, $0)] } ?? []
        }
        return matches
            .filter { name, _ in access.rule(for: name).map { access.mayObserve($0, peer) } ?? true }
            .sorted { $0.1.sequence < $1.1.sequence }
            .map { name, entry in
                NotificationFrame(sequence: entry.sequence, sender: entry.sender, name: name, payload: entry.payload)
            }
    }

    /// Sets a state value; `false` when the setter's quota of state names is used up.
    func setState(_ value: UInt64, for name: String, uid: UInt32) -> Bool {
        if var existing = states[ExactName(name)] {
            existing.value = value
            states[ExactName(name)] = existing
            return true
        }
        let account = account(for: uid)
        if !account.isExempt, account.stateNames >= quotas.stateNamesPerUID { return false }
        account.stateNames += 1
        states[ExactName(name)] = (value, uid)
        return true
    }

    func state(of name: String) -> UInt64? { states[ExactName(name)]?.value }

    // MARK: Held notifications

    /// Connections holding notifications; they are offered a release regularly, because a connection held
    /// back by its user's quota (not its own queue) gets no write completion to trigger one.
    private var holding: [ObjectIdentifier: ClientConnection] = [:]

    func startedHolding(_ connection: ClientConnection) { holding[ObjectIdentifier(connection)] = connection }
    func stoppedHolding(_ connection: ClientConnection) { holding.removeValue(forKey: ObjectIdentifier(connection)) }

    func releaseHeldConnections() {
        for connection in Array(holding.values) { connection.releaseHeldIfPossible() }
    }

    // MARK: Flushing

    /// Called by a connection the first time bytes are appended to it since its last flush.
    func markDirty(_ connection: ClientConnection) {
        dirty.append(connection)
    }

    /// Hands every touched connection's bytes to its channel: one write and flush per connection per burst.
    func flushDirtyConnections() {
        guard !dirty.isEmpty else { return }
        // A flush may close a connection synchronously (and so touch `dirty`): iterate a swapped-out list,
        // then hand its storage back so steady-state flushing allocates nothing here.
        var touched: [ClientConnection] = []
        swap(&touched, &dirty)
        for connection in touched {
            connection.flushOutbound()
        }
        touched.removeAll(keepingCapacity: true)
        if dirty.isEmpty { dirty = touched }
    }

    // MARK: Introspection

    /// Records the counters once a second, for the per-second rates in `status`.
    func sampleRates() {
        rateSamples.append((.now(), statistics.posts, statistics.deliveries))
        if rateSamples.count > 6 { rateSamples.removeFirst(rateSamples.count - 6) }
    }

    func status() -> Introspection.Status {
        var postsPerSecond = 0.0
        var deliveriesPerSecond = 0.0
        if let first = rateSamples.first, let last = rateSamples.last, last.time > first.time {
            let seconds = Double((last.time - first.time).nanoseconds) / 1e9
            postsPerSecond = Double(last.posts - first.posts) / seconds
            deliveriesPerSecond = Double(last.deliveries - first.deliveries) / seconds
        }
        let clients = connections.values
        return Introspection.Status(
            version: NotifyServer.version, instanceID: instanceID.description, pid: daemonPID,
            uptimeSeconds: Double((NIODeadline.now() - startTime).nanoseconds) / 1e9,
            connections: clients.count, subscriptions: clients.reduce(0) { $0 + $1.subscriptionCount },
            subscribedNames: exact.count, patterns: patterns.count, stateNames: states.count,
            retainedNames: retained.count, posts: statistics.posts, deliveries: statistics.deliveries,
            postsPerSecond: postsPerSecond, deliveriesPerSecond: deliveriesPerSecond, merged: statistics.merged,
            dropped: statistics.dropped, slowConsumerDisconnects: statistics.slowConsumerDisconnects,
            residentMemoryBytes: residentMemoryBytes, outboundBytes: clients.reduce(0) { $0 + $1.pendingOutboundBytes },
            heldBytes: clients.reduce(0) { $0 + $1.heldBytes }, configurationReloads: configurationReloads,
            lastReloadError: lastReloadError, acceptFailures: statistics.acceptFailures,
            connectionsRefused: statistics.connectionsRefused)
    }

    /// Reloads handled so far and why the last one failed, for `notifyctl reload` to wait on.
    private(set) var configurationReloads: UInt64 = 0
    private(set) var lastReloadError: String?

    /// Counts a reload once its outcome is in force (the new rules applied, or the old ones kept).
    func noteReload(error: String?) {
        configurationReloads += 1
        lastReloadError = error
    }

    /// Names that `peer` may observe, optionally only those matching `pattern`.
    func names(matching pattern: NotificationPattern?, visibleTo peer: AccessControl.Peer) -> [Introspection.Name] {
        var all = Set(exact.keys)
        all.formUnion(states.keys)
        all.formUnion(retained.keys)
        return all.filter { pattern?.matches($0.string) ?? true }
            .filter { name in access.rule(for: name.string).map { access.mayObserve($0, peer) } ?? true }
            .sorted { $0.string.utf8.lexicographicallyPrecedes($1.string.utf8) }
            .map { name in
                Introspection.Name(
                    name: name.string, subscribers: exact[name]?.count ?? 0, state: states[name]?.value,
                    hasRetained: retained[name] != nil)
            }
    }

    /// Clients visible to `uid`: all of them for root, the user's own otherwise.
    func clients(visibleTo uid: UInt32) -> [Introspection.Client] {
        connections.values
            .filter { uid == 0 || $0.credentials.uid == uid }
            .sorted { $0.number < $1.number }
            .map { $0.introspection() }
    }

    /// Answers a `QUERY`: the JSON documents to send, the last in `QUERY_RESULT`, any before it in
    /// `QUERY_RESULT_PART` (only when the kind byte asks for parts: a names or clients list too long for one
    /// frame is then cut between elements).
    func query(kind rawKind: UInt8, argument: String, requester: AccessControl.Peer) -> Result<[ByteBuffer], AccessControl.Denial> {
        let takesParts = rawKind & QueryKind.partsFlag != 0
        let kind = rawKind & ~QueryKind.partsFlag
        // Each frame carries the type, the request id and the JSON's length before the JSON.
        let room = Int(configuration.limits.maxFrameLength) - 1 - 4 - 4
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let parts: [ByteBuffer]
        do {
            switch QueryKind(rawValue: kind) {
            case .status:
                parts = [ByteBuffer(bytes: try encoder.encode(status()))]
            case .names:
                var pattern: NotificationPattern?
                if !argument.isEmpty {
                    do {
                        pattern = try NotificationPattern(argument)
                    } catch {
                        return .failure(AccessControl.Denial(message: error.description))
                    }
                }
                parts = try Self.arrays(of: names(matching: pattern, visibleTo: requester), encoder: encoder, room: room)
            case .clients:
                parts = try Self.arrays(of: clients(visibleTo: requester.uid), encoder: encoder, room: room)
            case nil:
                return .failure(AccessControl.Denial(message: "unknown query kind \(kind) (1 status, 2 names, 3 clients)"))
            }
        } catch {
            return .failure(AccessControl.Denial(message: "cannot encode the answer: \(error)"))
        }
        guard takesParts || parts.count == 1, parts.allSatisfy({ $0.readableBytes <= room }) else {
            let size = parts.reduce(0) { $0 + $1.readableBytes }
            return .failure(
                AccessControl.Denial(
                    message: "the answer is about \(size) bytes, more than a frame holds (\(room)); ask for it in parts "
                        + "(kind | 0x80) or narrow a names query with a pattern"))
        }
        return .success(parts)
    }

    /// `elements` as JSON arrays of at most `room` bytes each (at least one array, maybe empty).
    private static func arrays<Element: Encodable>(of elements: [Element], encoder: JSONEncoder, room: Int) throws -> [ByteBuffer] {
        var arrays: [ByteBuffer] = []
        var current = ByteBuffer(staticString: "[")
        for element in elements {
            let encoded = try encoder.encode(element)
            // One byte for the comma or the opening bracket, one for the closing bracket.
            if current.readableBytes > 1, current.readableBytes + 1 + encoded.count + 1 > room {
                current.writeStaticString("]")
                arrays.append(current)
                current = ByteBuffer(staticString: "[")
            }
            if current.readableBytes > 1 { current.writeStaticString(",") }
            current.writeBytes(encoded)
        }
        current.writeStaticString("]")
        arrays.append(current)
        return arrays
    }

    /// This process's resident set size as last sampled (off the event loop, every second).
    var residentMemoryBytes: UInt64 = 0

    /// This process's resident set size, from `/proc/self/statm` (a file read: never on the event loop).
    static func residentMemory() -> UInt64 {
        guard let file = fopen("/proc/self/statm", "r") else { return 0 }
        defer { fclose(file) }
        var size: UInt64 = 0
        var resident: UInt64 = 0
        guard withUnsafeMutablePointer(to: &size, { sizePointer in
            withUnsafeMutablePointer(to: &resident) { residentPointer in
                withVaList([sizePointer, residentPointer]) { vfscanf(file, "%llu %llu", $0) }
            }
        }) == 2 else { return 0 }
        return resident * UInt64(sysconf(Int32(_SC_PAGESIZE)))
    }
}

/// Counters kept by the router, for logs and introspection.
struct ServerStatistics: Sendable {
    var connectionsAccepted: UInt64 = 0
    var posts: UInt64 = 0
    var deliveries: UInt64 = 0
    var merged: UInt64 = 0
    var dropped: UInt64 = 0
    var slowConsumerDisconnects: UInt64 = 0
    /// `accept` calls that failed for want of a file descriptor (see ``AcceptGuard``).
    var acceptFailures: UInt64 = 0
    /// Connections accepted on the reserve descriptor and closed with `ERROR unavailable`.
    var connectionsRefused: UInt64 = 0
}
