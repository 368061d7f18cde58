import NotifyWire

/// A point-in-time view of the daemon's state, for introspection and tests.
package struct ServerSnapshot: Sendable {
    /// One client connection.
    package struct Client: Sendable {
        /// The connection's number in accept order (1 for the first).
        package var number: UInt64
        /// The peer's credentials.
        package var credentials: SenderCredentials
        /// The name the client gave in `HELLO`.
        package var clientName: String
        /// Subscriptions the connection holds.
        package var subscriptions: Int
        /// Bytes queued for it and not yet written to its socket.
        package var pendingBytes: Int
        /// Notifications dropped for it under the `queue` policy or evicted from what was held for it.
        package var droppedNotifications: UInt64
        /// The most requests (or posts that started a run) the daemon served for it in one turn of its event
        /// loop: bounded, so that one client cannot hold the loop.
        package var mostFramesInOneTurn: Int
    }

    /// The open connections.
    package var clients: [Client]
    /// Names with at least one subscriber.
    package var names: Int
    /// Accepted posts since start (also the last sequence number).
    package var posts: UInt64
    /// Notifications queued to connections since start.
    package var deliveries: UInt64
    /// Notifications dropped by outbound bounds since start.
    package var dropped: UInt64
    /// The per-connection bound on pending bytes.
    package var outboundByteLimit: Int
    /// Nodes of the pattern trie: the memory all patterns take, and the most one match can visit.
    package var patternNodes: Int
}
