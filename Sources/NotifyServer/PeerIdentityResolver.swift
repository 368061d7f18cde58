import NIOCore
import NIOPosix
import NotifyWire

/// Runs ``PeerIdentityLookup`` for new connections on a thread pool and hands the answers back on the event
/// loop, so a slow NSS source delays only the connections waiting for it.
///
/// A user's groups are cached for ``PeerIdentityLookup/groupCacheSeconds``: its next connections get them at
/// once, without leaving the event loop; command names are read in batches (``CommandNameReader``). Connections of one
/// user whose groups are being looked up wait for that lookup rather than queue one each, so hung lookups hold at
/// most one pool thread per user; and none waits past ``PeerIdentityLookup/answerDeadlineSeconds``: it is then
/// served with the kernel's primary group, and given the full groups when the lookup answers. A failed lookup is
/// not cached. Lives on the server's event loop, like the router that owns it.
final class PeerIdentityResolver {
    private struct Key: Hashable {
        var uid: UInt32
        var gid: UInt32
    }

    /// The connections waiting for one user's lookup, and whether they were served without it already.
    private struct Flight {
        /// Each with whether it still waits (`false` once closed): those that do not are dropped as more come, so
        /// a client reconnecting in a loop while the lookup hangs costs nothing that lasts.
        var waiting: [(found: (Set<UInt32>) -> Void, isWaiting: () -> Bool)] = []
        var pruneAt = 64
        var deadline: Scheduled<Void>?
        var fellBack = false

        mutating func add(_ found: @escaping (Set<UInt32>) -> Void, isWaiting: @escaping () -> Bool) {
            waiting.append((found, isWaiting))
            guard waiting.count >= pruneAt else { return }
            waiting.removeAll { !$0.isWaiting() }
            pruneAt = max(64, 2 * waiting.count)
        }
    }

    private static let cacheLimit = 4_096

    private let eventLoop: EventLoop
    private let pool: NIOThreadPool?
    private let lookup: PeerIdentityLookup
    /// Command names, read at the server's tick for the connections still open then.
    let commands: CommandNameReader
    private var cache: [Key: (groups: Set<UInt32>, expires: NIODeadline)] = [:]
    private var flights: [Key: Flight] = [:]
    /// Group lookups started so far (tests count them).
    private(set) var groupLookups = 0
    /// Connections served with their primary group only because their lookup passed its deadline or failed.
    private(set) var fallbacks = 0
    /// Connections kept for lookups in flight (tests check that closed ones do not pile up).
    var waitingConnections: Int { flights.values.reduce(0) { $0 + $1.waiting.count } }

    /// - Parameter pool: where lookups run; `nil` runs them on the event loop (only for tests that never
    ///   connect a client).
    init(eventLoop: EventLoop, pool: NIOThreadPool?, lookup: PeerIdentityLookup) {
        self.eventLoop = eventLoop
        self.pool = pool
        self.lookup = lookup
        self.commands = CommandNameReader(eventLoop: eventLoop, pool: pool, command: lookup.command)
    }

    /// Finds `credentials`' groups and command name. `groupsFound` runs on the event loop: at once when the
    /// groups are cached, else after the lookup, or at its deadline with the primary group only and then again
    /// with the full groups; `commandFound` runs on the event loop once the command name is read, after the next
    /// tick (``CommandNameReader``), if the connection is still open then.
    ///
    /// `isWaiting` tells whether the connection still wants the answers (it may close while the lookup hangs).
    func resolve(
        _ credentials: SenderCredentials, groupsFound: @escaping (Set<UInt32>) -> Void,
        commandFound: @escaping (String?) -> Void, isWaiting: @escaping () -> Bool
    ) {
        let key = Key(uid: credentials.uid, gid: credentials.gid)
        let now = NIODeadline.now()
        if let cached = cache[key].flatMap({ $0.expires > now ? $0.groups : nil }) {
            groupsFound(cached)
        } else if flights[key] != nil {
            flights[key]!.add(groupsFound, isWaiting: isWaiting)
            if flights[key]!.fellBack { groupsFound([key.gid]) }
        } else {
            var flight = Flight()
            flight.add(groupsFound, isWaiting: isWaiting)
            flights[key] = flight
            startGroupLookup(key)
        }
        commands.enqueue(pid: credentials.pid, found: commandFound, isWaiting: isWaiting)
    }

    private func startGroupLookup(_ key: Key) {
        groupLookups += 1
        let lookup = self.lookup
        guard let pool else {
            land(lookup.groups(key.uid, key.gid), for: key)
            return
        }
        flights[key]?.deadline = eventLoop.assumeIsolated().scheduleTask(
            in: .nanoseconds(Int64(lookup.answerDeadlineSeconds * 1e9))
        ) { [self] in
            guard flights[key] != nil, !flights[key]!.fellBack else { return }
            flights[key]!.fellBack = true
            fallbacks += flights[key]!.waiting.count
            for waiting in flights[key]!.waiting { waiting.found([key.gid]) }
        }
        pool.runIfActive(eventLoop: eventLoop) { lookup.groups(key.uid, key.gid) }.assumeIsolated().whenComplete {
            [self] result in
            // A pool that stopped (the server is shutting down) answers nothing: the primary group is all we know.
            land((try? result.get()) ?? nil, for: key)
        }
    }

    /// A lookup answered (`nil`: it failed): every connection waiting for it gets the groups.
    private func land(_ groups: Set<UInt32>?, for key: Key) {
        guard let flight = flights.removeValue(forKey: key) else { return }
        flight.deadline?.cancel()
        if let groups { remember(groups, for: key) } else if !flight.fellBack { fallbacks += flight.waiting.count }
        // After a fallback, only news is worth telling: the full groups.
        guard groups != nil || !flight.fellBack else { return }
        for waiting in flight.waiting { waiting.found(groups ?? [key.gid]) }
    }

    private func remember(_ groups: Set<UInt32>, for key: Key) {
        guard lookup.groupCacheSeconds > 0 else { return }
        let now = NIODeadline.now()
        if cache.count >= Self.cacheLimit { cache = cache.filter { $0.value.expires > now } }
        if cache.count < Self.cacheLimit {
            cache[key] = (groups, now + .nanoseconds(Int64(lookup.groupCacheSeconds * 1e9)))
        }
    }
}
