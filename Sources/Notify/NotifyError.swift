#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Errors reported by ``NotifyCenter``.
public enum NotifyError: Error, Sendable, CustomStringConvertible {
    /// No daemon accepted a connection at `path`.
    case cannotConnect(path: String, reason: String)
    /// The daemon at `path` runs as a user ``NotifyCenter/DaemonUser`` does not allow (`uid`): the center
    /// does not talk to it, since another user may be posing as your daemon.
    case untrustedDaemon(path: String, uid: UInt32)
    /// The center is not connected to the daemon right now (it keeps reconnecting in the background).
    case notConnected(path: String)
    /// The connection ended before the daemon answered.
    case connectionLost(reason: String)
    /// The name does not follow the name grammar; ``NameError`` says where.
    case invalidName(NameError)
    /// The payload is larger than the daemon accepts.
    case payloadTooLarge(size: Int, limit: Int)
    /// The daemon rejected the request: `code` is its ``ErrorCode`` (`nil`: a code this library does not know, from a
    /// newer daemon), `message` the daemon's explanation.
    case rejected(code: ErrorCode?, message: String)
    /// Waiting for the daemon took longer than the given time.
    case timedOut(operation: String, seconds: Double)
    /// The center was closed.
    case closed
    /// Another message type in this process already uses this name.
    case messageNameConflict(name: String, type: String)
    /// A typed message could not be encoded.
    case encodingFailed(type: String, reason: String)
    /// The daemon has not read what this center sent (it is stopped, hung, or far slower than this poster), and
    /// `queuedBytes` already wait (``NotifyCenter/Configuration/outgoingLimit``): the post or request was not sent.
    case daemonNotReading(queuedBytes: Int)

    /// A sentence for people: what went wrong and, where it helps, what to do about it.
    public var description: String {
        switch self {
        case .cannotConnect(let path, let reason):
            return "cannot connect to notifyd at \(path): \(reason)"
                + " (is the daemon running? start it with 'notifyd' or 'make run', or set NOTIFYD_SOCKET)"
        case .untrustedDaemon(let path, let uid):
            return "refusing the daemon at \(path): it runs as uid \(uid), not as you (uid \(getuid())) or root, "
                + "so another user may be posing as your daemon to read what you post. Remove that socket and its "
                + "directory, or set NOTIFYD_DAEMON_UID=\(uid) if you trust that user"
        case .notConnected(let path):
            return "not connected to notifyd at \(path) (reconnecting in the background)"
        case .connectionLost(let reason):
            return "the connection to notifyd was lost: \(reason)"
        case .invalidName(let error):
            return error.description
        case .payloadTooLarge(let size, let limit):
            return "payload of \(size) bytes exceeds the daemon's limit of \(limit) bytes"
        case .rejected(let code, let message):
            return "notifyd rejected the request (\(code.map { "\($0)" } ?? "unknown error")): \(message)"
        case .timedOut(let operation, let seconds):
            return "\(operation) did not complete within \(seconds) seconds"
        case .closed:
            return "the notification center was closed"
        case .messageNameConflict(let name, let type):
            return "\(type) cannot use the name '\(name)': another message type in this process already does"
        case .encodingFailed(let type, let reason):
            return "cannot encode \(type): \(reason)"
        case .daemonNotReading(let queuedBytes):
            return "notifyd is not reading what this process sends (stopped or hung?): \(queuedBytes) bytes already "
                + "wait to be written, so this was not sent"
        }
    }
}
