import NIOCore
import NIOPosix
import NotifyWire

/// Runs ``PeerIdentityLookup`` for new connections on a thread pool and hands the answers back on the event
/// loop, so a slow NSS source delays only the connection waiting for it.
///
/// A user's groups are cached for ``PeerIdentityLookup/groupCacheSeconds``: its next connections get them at
/// once, without leaving the event loop, and only the command name is read in the background. Lives on the
/// server's event loop, like the router that owns it.
final class PeerIdentityResolver {
    private struct Key: Hashable {
        var uid: UInt32
        var gid: UInt32
    }

    private static let cacheLimit = 4_096

    private let eventLoop: EventLoop
    private let pool: NIOThreadPool?
    private let lookup: PeerIdentityLookup
    private var cache: [Key: (groups: Set<UInt32>, expires: NIODeadline)] = [:]

    /// - Parameter pool: where lookups run; `nil` runs them on the event loop (only for tests that never
    ///   connect a client).
    init(eventLoop: EventLoop, pool: NIOThreadPool?, lookup: PeerIdentityLookup) {
        self.eventLoop = eventLoop
        self.pool = pool
        self.lookup = lookup
    }

    /// Finds `credentials`' groups and command name. `groupsFound` runs on the event loop: at once when the
    /// groups are cached, else after the lookup; `commandFound` runs on the event loop after the groups.
    func resolve(
        _ credentials: SenderCredentials, groupsFound: @escaping (Set<UInt32>) -> Void,
        commandFound: @escaping (String?) -> Void
    ) {
        let key = Key(uid: credentials.uid, gid: credentials.gid)
        let now = NIODeadline.now()
        let cached = cache[key].flatMap { $0.expires > now ? $0.groups : nil }
        if let cached { groupsFound(cached) }
        let lookup = self.lookup
        let work: @Sendable () -> (groups: Set<UInt32>?, command: String?) = {
            (cached == nil ? lookup.groups(key.uid, key.gid) : nil, lookup.command(credentials.pid))
        }
        guard let pool else {
            let answer = work()
            if let groups = answer.groups { groupsFound(groups) }
            commandFound(answer.command)
            return
        }
        pool.runIfActive(eventLoop: eventLoop, work).assumeIsolated().whenComplete { result in
            switch result {
            case .success(let answer):
                if let groups = answer.groups {
                    self.remember(groups, for: key)
                    groupsFound(groups)
                }
                commandFound(answer.command)
            case .failure:
                // The pool stopped (the server is shutting down): the kernel's primary group is all we know.
                if cached == nil { groupsFound([credentials.gid]) }
                commandFound(nil)
            }
        }
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
