// The answers of the daemon's introspection queries: the JSON documents of `QUERY_RESULT` (`protocol/PROTOCOL.md`
// § 11.3), snake_case on the wire. The daemon encodes them and clients decode them with the same types, so
// `notifyctl --json` prints what the daemon sent.

/// Daemon-wide figures, the answer of `NotifyCenter.daemonStatus()` (`notifyctl status`).
public struct DaemonStatus: Codable, Sendable, Hashable {
    /// The daemon's version, e.g. `0.1.0`.
    public var version: String
    /// This run of the daemon, as 32 lowercase hex digits (the `instance_id` of `WELCOME`).
    public var instanceID: String
    /// The daemon's process id.
    public var pid: UInt32
    /// Seconds since the daemon started.
    public var uptimeSeconds: Double
    /// Open connections.
    public var connections: Int
    /// Subscriptions of all connections.
    public var subscriptions: Int
    /// Names with at least one exact subscriber.
    public var subscribedNames: Int
    /// Pattern subscriptions, counted once per connection and pattern text.
    public var patterns: Int
    /// Names with a state value.
    public var stateNames: Int
    /// Names with a retained notification.
    public var retainedNames: Int
    /// Posts accepted since the start (the last sequence number).
    public var posts: UInt64
    /// Notifications queued or held for connections since the start.
    public var deliveries: UInt64
    /// Posts per second over the last few seconds.
    public var postsPerSecond: Double
    /// Deliveries per second over the last few seconds.
    public var deliveriesPerSecond: Double
    /// Notifications merged into later ones under the `coalesce` policy.
    public var merged: UInt64
    /// Notifications dropped under the `queue` policy or the connection bound.
    public var dropped: UInt64
    /// Connections closed under the `disconnect` policy.
    public var slowConsumerDisconnects: UInt64
    /// The daemon's resident set size, sampled each second (0 if unknown).
    public var residentMemoryBytes: UInt64
    /// Bytes queued for all connections and not yet written.
    public var outboundBytes: Int
    /// Bytes of the notifications held for slow or suspended connections.
    public var heldBytes: Int
    /// Configuration reloads (SIGHUP) handled since the start, whether they applied a file or failed; `nil`
    /// from a daemon that does not report them.
    public var configurationReloads: UInt64?
    /// Why the last reload failed (the file kept its previous rules); `nil` when it succeeded.
    public var lastReloadError: String?
    /// Times accepting a connection failed because the daemon (`EMFILE`) or the system (`ENFILE`) had no
    /// file descriptor left; `nil` from a daemon that does not report it.
    public var acceptFailures: UInt64?
    /// Connections the daemon answered with `ERROR unavailable` and closed because it had no file descriptor
    /// left for them; `nil` from a daemon that does not report it.
    public var connectionsRefused: UInt64?

    /// Creates a value from its fields.
    public init(
        version: String, instanceID: String, pid: UInt32, uptimeSeconds: Double, connections: Int,
        subscriptions: Int, subscribedNames: Int, patterns: Int, stateNames: Int, retainedNames: Int, posts: UInt64,
        deliveries: UInt64, postsPerSecond: Double, deliveriesPerSecond: Double, merged: UInt64, dropped: UInt64,
        slowConsumerDisconnects: UInt64, residentMemoryBytes: UInt64, outboundBytes: Int, heldBytes: Int,
        configurationReloads: UInt64? = nil, lastReloadError: String? = nil, acceptFailures: UInt64? = nil,
        connectionsRefused: UInt64? = nil
    ) {
        self.version = version
        self.instanceID = instanceID
        self.pid = pid
        self.uptimeSeconds = uptimeSeconds
        self.connections = connections
        self.subscriptions = subscriptions
        self.subscribedNames = subscribedNames
        self.patterns = patterns
        self.stateNames = stateNames
        self.retainedNames = retainedNames
        self.posts = posts
        self.deliveries = deliveries
        self.postsPerSecond = postsPerSecond
        self.deliveriesPerSecond = deliveriesPerSecond
        self.merged = merged
        self.dropped = dropped
        self.slowConsumerDisconnects = slowConsumerDisconnects
        self.residentMemoryBytes = residentMemoryBytes
        self.outboundBytes = outboundBytes
        self.heldBytes = heldBytes
        self.configurationReloads = configurationReloads
        self.lastReloadError = lastReloadError
        self.acceptFailures = acceptFailures
        self.connectionsRefused = connectionsRefused
    }

    enum CodingKeys: String, CodingKey {
        case version = "version"
        case instanceID = "instance_id"
        case pid = "pid"
        case uptimeSeconds = "uptime_seconds"
        case connections = "connections"
        case subscriptions = "subscriptions"
        case subscribedNames = "subscribed_names"
        case patterns = "patterns"
        case stateNames = "state_names"
        case retainedNames = "retained_names"
        case posts = "posts"
        case deliveries = "deliveries"
        case postsPerSecond = "posts_per_second"
        case deliveriesPerSecond = "deliveries_per_second"
        case merged = "merged"
        case dropped = "dropped"
        case slowConsumerDisconnects = "slow_consumer_disconnects"
        case residentMemoryBytes = "resident_memory_bytes"
        case outboundBytes = "outbound_bytes"
        case heldBytes = "held_bytes"
        case configurationReloads = "configuration_reloads"
        case lastReloadError = "last_reload_error"
        case acceptFailures = "accept_failures"
        case connectionsRefused = "connections_refused"
    }
}

/// A name the daemon knows, with subscribers, a state value or a retained notification: one entry of
/// `NotifyCenter.daemonNames(matching:)` (`notifyctl names`).
public struct DaemonName: Codable, Sendable, Hashable {
    /// The name.
    public var name: String
    /// Connections subscribed to exactly this name.
    public var subscribers: Int
    /// The name's state value, if one is set.
    public var state: UInt64?
    /// Whether the name has a retained notification (its current value).
    public var hasRetained: Bool

    /// Creates a value from its fields.
    public init(
        name: String, subscribers: Int, state: UInt64?, hasRetained: Bool
    ) {
        self.name = name
        self.subscribers = subscribers
        self.state = state
        self.hasRetained = hasRetained
    }

    enum CodingKeys: String, CodingKey {
        case name = "name"
        case subscribers = "subscribers"
        case state = "state"
        case hasRetained = "has_retained"
    }
}

/// A client connected to the daemon: one entry of `NotifyCenter.daemonClients()` (`notifyctl clients`).
public struct DaemonClient: Codable, Sendable, Hashable {
    /// The connection's number, in the order the daemon accepted connections.
    public var connection: UInt64
    /// The client's process id, as the kernel reported it when it connected (0: another pid namespace).
    public var pid: UInt32
    /// The client's user id.
    public var uid: UInt32
    /// The client's primary group id.
    public var gid: UInt32
    /// The process's command name (`/proc/PID/comm`), when readable.
    public var command: String?
    /// The name the client gave in `HELLO` (the library sends the program's name by default).
    public var clientName: String
    /// The connection's subscriptions.
    public var subscriptions: Int
    /// Bytes queued for the client and not yet written to its socket.
    public var pendingBytes: Int
    /// Bytes of the notifications held for the client (it reads slowly, or is suspended).
    public var heldBytes: Int
    /// Whether the client has suspended its deliveries.
    public var suspended: Bool
    /// Notifications merged into later ones for this client under `coalesce`.
    public var merged: UInt64
    /// Notifications dropped for this client under `queue` or evicted by the bounds on held notifications.
    public var dropped: UInt64
    /// Notifications held for the client and not yet queued for its socket; `nil` from a daemon that does not
    /// report lag.
    public var lagNotifications: Int?
    /// Bytes owed to the client: queued and not yet written, plus held; `nil` from a daemon that does not report
    /// lag.
    public var lagBytes: Int?
    /// How long the oldest byte owed to the client has waited, in seconds (0 when nothing waits); `nil` from a
    /// daemon that does not report lag.
    public var lagOldestSeconds: Double?

    /// Creates a value from its fields.
    public init(
        connection: UInt64, pid: UInt32, uid: UInt32, gid: UInt32, command: String?, clientName: String,
        subscriptions: Int, pendingBytes: Int, heldBytes: Int, suspended: Bool, merged: UInt64, dropped: UInt64,
        lagNotifications: Int? = nil, lagBytes: Int? = nil, lagOldestSeconds: Double? = nil
    ) {
        self.connection = connection
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.command = command
        self.clientName = clientName
        self.subscriptions = subscriptions
        self.pendingBytes = pendingBytes
        self.heldBytes = heldBytes
        self.suspended = suspended
        self.merged = merged
        self.dropped = dropped
        self.lagNotifications = lagNotifications
        self.lagBytes = lagBytes
        self.lagOldestSeconds = lagOldestSeconds
    }

    enum CodingKeys: String, CodingKey {
        case connection = "connection"
        case pid = "pid"
        case uid = "uid"
        case gid = "gid"
        case command = "command"
        case clientName = "client_name"
        case subscriptions = "subscriptions"
        case pendingBytes = "pending_bytes"
        case heldBytes = "held_bytes"
        case suspended = "suspended"
        case merged = "merged"
        case dropped = "dropped"
        case lagNotifications = "lag_notifications"
        case lagBytes = "lag_bytes"
        case lagOldestSeconds = "lag_oldest_seconds"
    }
}
