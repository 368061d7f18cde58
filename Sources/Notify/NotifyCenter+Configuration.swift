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

        /// Creates a configuration; every parameter has the default described on its property.
        public init(
            socketPath: String? = nil, clientName: String? = nil, reconnect: ReconnectPolicy = .default,
            logger: Logger? = nil, whileDisconnected: DisconnectedPosting = .fail
        ) {
            self.whileDisconnected = whileDisconnected
            self.socketPath =
                socketPath ?? SocketLocation.defaultPath(uid: getuid(), environment: ProcessInfo.processInfo.environment)
            self.clientName = (clientName ?? ProcessInfo.processInfo.processName).truncatedUTF8(
                maxBytes: ProtocolConstants.maxClientNameLength)
            self.reconnect = reconnect
            self.logger = logger ?? Logger(label: "notify", factory: { _ in SwiftLogNoOpLogHandler() })
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
