/// Something that happened to a center's connection to the daemon.
public enum ConnectionEvent: Sendable, Equatable, CustomStringConvertible {
    /// The handshake completed. `daemonRestarted` is true when the daemon's instance id differs from the one
    /// seen on the previous connection (a new daemon process), false on the first connection or a reconnection
    /// to the same daemon. Every live observation has been resubscribed.
    case connected(daemonRestarted: Bool, instanceID: InstanceID)
    /// The connection ended; the center reconnects by itself unless it was closed.
    case disconnected(reason: String)
    /// The daemon dropped notifications for this center because it could not take them in time: for the
    /// subscription to `pattern` under its `queue` policy, or (`pattern` nil) because the daemon's bound for
    /// held notifications was reached.
    case notificationsDropped(count: UInt64, pattern: String?)
    /// The daemon rejected a request that had no caller waiting for the answer (a subscription, or a post
    /// made without acknowledgement).
    case requestRejected(operation: String, error: String)
    /// Posts made while disconnected (with ``NotifyCenter/DisconnectedPosting/wait(timeout:)``) were discarded
    /// because no connection came within their timeout.
    case postsExpired(count: Int)
    /// A payload posted under a typed message's name did not decode as the observed type.
    case messageDecodingFailed(MessageDecodingError)

    /// Whether both are the same event with the same values (a decoding failure: same name, type and
    /// notification).
    public static func == (lhs: ConnectionEvent, rhs: ConnectionEvent) -> Bool {
        switch (lhs, rhs) {
        case (.messageDecodingFailed(let a), .messageDecodingFailed(let b)):
            a.name == b.name && a.typeName == b.typeName && a.notification == b.notification
        case (.connected(let a, let b), .connected(let c, let d)): a == c && b == d
        case (.disconnected(let a), .disconnected(let b)): a == b
        case (.notificationsDropped(let a, let b), .notificationsDropped(let c, let d)): a == c && b == d
        case (.requestRejected(let a, let b), .requestRejected(let c, let d)): a == c && b == d
        case (.postsExpired(let a), .postsExpired(let b)): a == b
        default: false
        }
    }

    /// One line for logs, e.g. `connected to daemon … (daemon restarted: yes)`; match on the cases, not on this.
    public var description: String {
        switch self {
        case .connected(let restarted, let instance):
            "connected to daemon \(instance) (daemon restarted: \(restarted ? "yes" : "no"))"
        case .disconnected(let reason): "disconnected: \(reason)"
        case .notificationsDropped(let count, let pattern):
            "daemon dropped \(count) notification(s) for this client" + (pattern.map { " on \($0)" } ?? "")
        case .requestRejected(let operation, let error): "\(operation) rejected: \(error)"
        case .messageDecodingFailed(let error): "\(error)"
        case .postsExpired(let count): "\(count) post(s) made while disconnected expired before a connection came"
        }
    }
}
