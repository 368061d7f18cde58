import NIOCore
import NIOPosix
import NotifyWire

/// Runs ``PeerIdentityLookup`` for new connections on a thread pool and hands the answers back on the event
/// loop, so a slow NSS source delays only the connection waiting for it. Group lists are cached per
/// (uid, gid) for a minute: a user's next connections need only the command-name read.
///
/// Lives on the server's event loop, like the router that owns it.
final class PeerIdentityResolver {
    /// What a connection learns once its lookup is done.
    struct Identity {
        var groups: Set<UInt32>
        var command: String?
    }

    private struct Key: Hashable {
        var uid: UInt32
        var gid: UInt32
    }

    static let cacheLifetime = TimeAmount.seconds(60)
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

    /// Looks up `credentials`' groups (unless cached) and command off the event loop; `completion` runs on the
    /// event loop.
    func resolve(_ credentials: SenderCredentials, _ completion: @escaping (Identity) -> Void) {
        let key = Key(uid: credentials.uid, gid: credentials.gid)
        let now = NIODeadline.now()
        let cached = cache[key].flatMap { $0.expires > now ? $0.groups : nil }
        let lookup = self.lookup
        let work: @Sendable () -> (groups: Set<UInt32>, command: String?, fresh: Bool) = {
            (cached ?? lookup.groups(key.uid, key.gid), lookup.command(credentials.pid), cached == nil)
        }
        guard let pool else {
            let answer = work()
            completion(Identity(groups: answer.groups, command: answer.command))
            return
        }
        pool.runIfActive(eventLoop: eventLoop, work).assumeIsolated().whenComplete { result in
            switch result {
            case .success(let answer):
                if answer.fresh { self.remember(answer.groups, for: key) }
                completion(Identity(groups: answer.groups, command: answer.command))
            case .failure:
                // The pool stopped (the server is shutting down): the kernel's primary group is all we know.
                completion(Identity(groups: [credentials.gid], command: nil))
            }
        }
    }

    private func remember(_ groups: Set<UInt32>, for key: Key) {
        let now = NIODeadline.now()
        if cache.count >= Self.cacheLimit { cache = cache.filter { $0.value.expires > now } }
        if cache.count < Self.cacheLimit { cache[key] = (groups, now + Self.cacheLifetime) }
    }
}
