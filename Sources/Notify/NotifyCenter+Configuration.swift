#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import NotifyWire

extension NotifyCenter {
    /// How a center connects to the daemon.
    public struct Configuration: Sendable {
        /// The daemon's socket. Default: `$NOTIFYD_SOCKET`, else `/run/notifyd/notifyd.sock` for root and
        /// `$XDG_RUNTIME_DIR/notifyd/notifyd.sock` for other users (see `protocol/PROTOCOL.md`).
        public var socketPath: String
        /// The name the daemon shows for this client in logs and introspection. Default: the process name.
        public var clientName: String
        /// When and how fast to reconnect after the connection is lost.
        public var reconnect: ReconnectPolicy
        /// Where the library logs connection events and rejected requests. Default: nowhere.
        public var logger: Logger
        /// What posting does while the center is not connected. Default: ``DisconnectedPosting/fail``.
        public var whileDisconnected: DisconnectedPosting
        /// Which user the daemon must run as before the center talks to it. Default: `$NOTIFYD_DAEMON_UID` (a
        /// uid, or `any`), else ``DaemonUser/sameUserOrRoot``.
        public var daemonUser: DaemonUser
        /// Whether this center's observations receive the notifications it posts itself. Default: true. A relay
        /// (`notifyd-bridge`) turns it off so the daemon never sends back what it posted; a daemon older than this
        /// option sends them all the same.
        public var receivesOwnPosts = true
        /// How many bytes of notifications and state changes (payloads, plus about 128 bytes each) may wait for
        /// handlers that run on a queue, thread, run loop or actor before the center stops reading from the
        /// daemon. Default: 8 MiB.
        ///
        /// While reading is paused the daemon treats the process as a slow subscriber: each subscription's policy
        /// decides what it keeps (see ``DeliveryPolicy``), so a handler slower than the posters costs the
        /// process about this much memory (plus what one read brought: up to a few MiB). The pause holds back every
        /// observation of the center, and replies to requests; it ends when what waits has fallen to half the
        /// limit. A target that never runs what it is given (a run loop that is not running, a suspended
        /// `OperationQueue`) holds it until its observation is cancelled. `.immediate` handlers run as
        /// notifications are read and are never charged. Values below zero count as zero.
        public var pendingDeliveryLimit = 8 << 20
        /// How many bytes of posts and requests may wait for a daemon that does not read them (stopped, hung) before
        /// `post` and requests throw ``NotifyError/daemonNotReading(queuedBytes:)`` instead of queueing more.
        /// Default: 16 MiB. A poster is never slowed: it is told. Subscribing and cancelling are never refused.
        /// What waits in all is up to about twice this, plus the channel's 4 MiB and the socket's buffers.
        public var outgoingLimit = 16 << 20

        /// Creates a configuration; every parameter has the default described on its property.
        public init(
            socketPath: String? = nil, clientName: String? = nil, reconnect: ReconnectPolicy = .default,
            logger: Logger? = nil, whileDisconnected: DisconnectedPosting = .fail, daemonUser: DaemonUser? = nil
        ) {
            self.whileDisconnected = whileDisconnected
            self.daemonUser = daemonUser ?? DaemonUser(environment: ProcessInfo.processInfo.environment)
            self.socketPath =
                socketPath ?? SocketLocation.defaultPath(uid: getuid(), environment: ProcessInfo.processInfo.environment)
            self.clientName = (clientName ?? ProcessInfo.processInfo.processName).truncatedUTF8(
                maxBytes: ProtocolConstants.maxClientNameLength)
            self.reconnect = reconnect
            self.logger = logger ?? Logger(label: "notify", factory: { _ in SwiftLogNoOpLogHandler() })
        }
    }

    /// Which user may run the daemon a center talks to, checked with `SO_PEERCRED` on every connection.
    ///
    /// Anyone can create a socket at a path another user's programs will look for (`/tmp/notifyd-UID` when
    /// `XDG_RUNTIME_DIR` is unset) and read what they post there; ssh-agent and tmux clients check their server's
    /// user for the same reason. A daemon on a socket in a directory only root can write to (the system unit's
    /// `/run/notifyd`, whose daemon runs as a dynamic user) is trusted whatever its user; see
    /// ``isRootOnlyDirectory(ofSocket:)``.
    public enum DaemonUser: Sendable, Hashable {
        /// This process's own user, or root.
        case sameUserOrRoot
        /// This process's own user, root, or `uid` (e.g. a daemon in a container that runs as its own user).
        case uid(UInt32)
        /// Any user: for sockets whose location alone is trusted.
        case anyUser

        /// `NOTIFYD_DAEMON_UID` (a uid, or `any`) from `environment`, else ``sameUserOrRoot``.
        public init(environment: [String: String]) {
            switch environment["NOTIFYD_DAEMON_UID"] {
            case "any": self = .anyUser
            case let text?: self = UInt32(text).map { .uid($0) } ?? .sameUserOrRoot
            case nil: self = .sameUserOrRoot
            }
        }

        /// Whether the directory holding the socket at `path` belongs to root and no one else may write to it,
        /// so that only root (or a service manager running as root) can have put a socket there: then the
        /// daemon's own user does not matter (the system unit's daemon runs as a dynamic user).
        public static func isRootOnlyDirectory(ofSocket path: String) -> Bool {
            let directory = path.lastIndex(of: "/").map { String(path[..<$0]) }.map { $0.isEmpty ? "/" : $0 } ?? "."
            var info = stat()
            guard stat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return false }
            return info.st_uid == 0 && info.st_mode & (S_IWGRP | S_IWOTH) == 0
        }

        /// Whether a daemon running as `daemonUID` may serve a process running as `ownUID`.
        public func allows(daemonUID: UInt32, ownUID: UInt32) -> Bool {
            if daemonUID == ownUID || daemonUID == 0 { return true }
            switch self {
            case .sameUserOrRoot: return false
            case .uid(let trusted): return daemonUID == trusted
            case .anyUser: return true
            }
        }
    }

    /// What posting does while the center is between connections.
    public enum DisconnectedPosting: Sendable, Hashable {
        /// `post`, `postAndWait` and `synchronize` throw ``NotifyError/notConnected(path:)`` at once.
        case fail
        /// `postAndWait` and `synchronize` wait up to `timeout` seconds for the connection; `post` keeps the
        /// notification (up to 10,000 of them) and sends it, in order, once connected. Posts still waiting when
        /// their timeout passes are discarded and reported as ``ConnectionEvent/postsExpired(count:)``.
        case wait(timeout: Double)
    }

    /// Reconnection after the daemon goes away: exponential backoff from ``initialDelay`` doubling up to
    /// ``maximumDelay``, reset after every successful handshake.
    ///
    /// While disconnected, a center also watches the socket path (inotify on its directory, or on the nearest
    /// existing parent while the directory does not exist) and connects as soon as a socket appears there, so a
    /// daemon that comes back is reached at once whatever the backoff; the backoff covers what the watch cannot
    /// see, such as a socket systemd keeps in place while the service restarts.
    public struct ReconnectPolicy: Sendable, Hashable {
        /// Seconds before the first attempt after a disconnect.
        public var initialDelay: Double
        /// The longest wait between attempts, in seconds.
        public var maximumDelay: Double
        /// Whether to reconnect at all.
        public var isEnabled: Bool

        /// Creates a policy.
        public init(initialDelay: Double, maximumDelay: Double, isEnabled: Bool = true) {
            self.initialDelay = initialDelay
            self.maximumDelay = max(initialDelay, maximumDelay)
            self.isEnabled = isEnabled
        }

        /// 50 ms, doubling up to 2 s.
        public static let `default` = ReconnectPolicy(initialDelay: 0.05, maximumDelay: 2)
        /// Never reconnect: after a disconnect, requests fail with ``NotifyError/notConnected(path:)``.
        public static let never = ReconnectPolicy(initialDelay: 0.05, maximumDelay: 0.05, isEnabled: false)
    }
}
