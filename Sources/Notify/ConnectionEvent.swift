import NotifyWire

/// Something that happened to a center's connection to the daemon.
public enum ConnectionEvent: Sendable, Hashable, CustomStringConvertible {
    /// The handshake completed. `daemonRestarted` is true when the daemon's instance id differs from the one
    /// seen on the previous connection (a new daemon process), false on the first connection or a reconnection
    /// to the same daemon. Every live observation has been resubscribed.
    case connected(daemonRestarted: Bool, instanceID: InstanceID)
    /// The connection ended; the center reconnects by itself unless it was closed.
    case disconnected(reason: String)
    /// The daemon dropped notifications for this center because it did not read them fast enough.
    case notificationsDropped(count: UInt64)
    /// The daemon rejected a request that had no caller waiting for the answer (a subscription, or a post
    /// made without acknowledgement).
    case requestRejected(operation: String, error: String)

    public var description: String {
        switch self {
        case .connected(let restarted, let instance):
            "connected to daemon \(instance) (daemon restarted: \(restarted ? "yes" : "no"))"
        case .disconnected(let reason): "disconnected: \(reason)"
        case .notificationsDropped(let count): "daemon dropped \(count) notification(s) for this client"
        case .requestRejected(let operation, let error): "\(operation) rejected: \(error)"
        }
    }
}
