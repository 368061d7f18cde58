import NotifyWire

/// Counters kept by the broker, for logs and introspection.
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
    /// Connections that closed, for any reason.
    var connectionsClosed: UInt64 = 0
    /// Requests refused with `permission-denied`.
    var permissionDenials: UInt64 = 0
    /// Requests and connections refused with `quota-exceeded`.
    var quotaRefusals: UInt64 = 0
    /// Connections closed for a protocol error (a fatal `ERROR` the client caused).
    var protocolErrors: UInt64 = 0

    /// Counts a refusal by its code.
    mutating func countRefusal(_ code: ErrorCode) {
        switch code {
        case .permissionDenied: permissionDenials += 1
        case .quotaExceeded: quotaRefusals += 1
        default: break
        }
    }
}
