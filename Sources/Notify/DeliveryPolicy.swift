import NotifyWire

/// What the daemon does with an observation's notifications while this process cannot take them in time (it
/// reads too slowly, or the center is suspended).
public enum DeliveryPolicy: Sendable, Hashable, CustomStringConvertible {
    /// Keep at most one pending notification per name, the latest, with a count of how many were merged into it
    /// (``ReceivedNotification/mergedCount``). The default.
    case coalesce
    /// Keep up to `limit` pending notifications in order; past that, drop the oldest and tell how many were dropped
    /// (``ReceivedNotification/droppedBefore``, ``ConnectionEvent/notificationsDropped(count:pattern:)``). `limit`
    /// must be at least 1.
    case queue(limit: UInt32)
    /// Close the connection with the `slow-consumer` error; the center reconnects and resubscribes as after any lost
    /// connection (``NotifyCenter/ReconnectPolicy``).
    case disconnect

    /// How this reads in logs and error messages: `coalesce`, `queue(100)` or `disconnect`.
    public var description: String { wire.description }

    /// The same policy in the wire protocol.
    var wire: NotifyWire.DeliveryPolicy {
        switch self {
        case .coalesce: .coalesce
        case .queue(let limit): .queue(limit: limit)
        case .disconnect: .disconnect
        }
    }
}
