import NotifyWire

/// A point-in-time view of the daemon's state, for introspection and tests.
public struct ServerSnapshot: Sendable {
    /// One client connection.
    public struct Client: Sendable {
        /// The connection's number in accept order (1 for the first).
        public var number: UInt64
        /// The peer's credentials.
        public var credentials: SenderCredentials
        /// The name the client gave in `HELLO`.
        public var clientName: String
        /// Subscriptions the connection holds.
        public var subscriptions: Int
        /// Bytes queued for it and not yet written to its socket.
        public var pendingBytes: Int
        /// Notifications dropped for it under the `queue` policy or evicted from what was held for it.
        public var droppedNotifications: UInt64
        /// The most requests (or posts that started a run) the daemon served for it in one turn of its event
        /// loop: bounded, so that one client cannot hold the loop.
        public var mostFramesInOneTurn: Int
    }

    /// The open connections.
    public var clients: [Client]
    /// Names with at least one subscriber.
    public var names: Int
    /// Accepted posts since start (also the last sequence number).
    public var posts: UInt64
    /// Notifications queued to connections since start.
    public var deliveries: UInt64
    /// Notifications dropped by outbound bounds since start.
    public var dropped: UInt64
    /// The per-connection bound on pending bytes.
    public var outboundByteLimit: Int
    /// Nodes of the pattern trie: the memory all patterns take, and the most one match can visit.
    public var patternNodes: Int
}
