/// The JSON documents a `QUERY_RESULT` carries (`protocol/PROTOCOL.md` § 11). Keys are snake_case on the wire.
package enum Introspection {
    /// Answer to `QUERY status`.
    package struct Status: Codable, Sendable, Hashable {
        /// The daemon's version, e.g. `0.1.0`.
        package var version: String
        /// This run of the daemon, as 32 lowercase hex digits (the `instance_id` of `WELCOME`).
        package var instanceID: String
        /// The daemon's process id.
        package var pid: UInt32
        /// Seconds since the daemon started.
        package var uptimeSeconds: Double
        /// Open connections.
        package var connections: Int
        /// Subscriptions of all connections.
        package var subscriptions: Int
        /// Names with at least one exact subscriber.
        package var subscribedNames: Int
        /// Pattern subscriptions, counted once per connection and pattern text.
        package var patterns: Int
        /// Names with a state value.
        package var stateNames: Int
        /// Names with a retained notification.
        package var retainedNames: Int
        /// Posts accepted since the start (the last sequence number).
        package var posts: UInt64
        /// Notifications queued or held for connections since the start.
        package var deliveries: UInt64
        /// Posts per second over the last few seconds.
        package var postsPerSecond: Double
        /// Deliveries per second over the last few seconds.
        package var deliveriesPerSecond: Double
        /// Notifications merged into later ones under the `coalesce` policy.
        package var merged: UInt64
        /// Notifications dropped under the `queue` policy or the connection bound.
        package var dropped: UInt64
        /// Connections closed under the `disconnect` policy.
        package var slowConsumerDisconnects: UInt64
        /// The daemon's resident set size, sampled each second (0 if unknown).
        package var residentMemoryBytes: UInt64
        /// Bytes queued for all connections and not yet written.
        package var outboundBytes: Int
        /// Bytes of the notifications held for slow or suspended connections.
        package var heldBytes: Int
        /// Configuration reloads (SIGHUP) handled since the start, whether they applied a file or failed; `nil`
        /// from a daemon that does not report them.
        package var configurationReloads: UInt64?
        /// Why the last reload failed (the file kept its previous rules); `nil` when it succeeded.
        package var lastReloadError: String?
        /// Times accepting a connection failed because the daemon (`EMFILE`) or the system (`ENFILE`) had no
        /// file descriptor left; `nil` from a daemon that does not report it.
        package var acceptFailures: UInt64?
        /// Connections the daemon answered with `ERROR unavailable` and closed because it had no file descriptor
        /// left for them; `nil` from a daemon that does not report it.
        package var connectionsRefused: UInt64?

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

        /// Creates an answer from its figures.
        package init(
            version: String, instanceID: String, pid: UInt32, uptimeSeconds: Double, connections: Int,
            subscriptions: Int, subscribedNames: Int, patterns: Int, stateNames: Int, retainedNames: Int,
            posts: UInt64, deliveries: UInt64, postsPerSecond: Double, deliveriesPerSecond: Double, merged: UInt64,
            dropped: UInt64, slowConsumerDisconnects: UInt64, residentMemoryBytes: UInt64, outboundBytes: Int,
            heldBytes: Int, configurationReloads: UInt64? = nil, lastReloadError: String? = nil,
            acceptFailures: UInt64? = nil, connectionsRefused: UInt64? = nil
        ) {
            self.acceptFailures = acceptFailures
            self.connectionsRefused = connectionsRefused
            self.configurationReloads = configurationReloads
            self.lastReloadError = lastReloadError
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
        }
    }

    /// One entry of the answer to `QUERY names`.
    package struct Name: Codable, Sendable, Hashable {
        /// The name.
        package var name: String
        /// Connections subscribed to exactly this name.
        package var subscribers: Int
        /// The name's state value, if one is set.
        package var state: UInt64?
        /// Whether the name has a retained notification (its current value).
        package var hasRetained: Bool

        enum CodingKeys: String, CodingKey {
            case name = "name"
            case subscribers = "subscribers"
            case state = "state"
            case hasRetained = "has_retained"
        }

        /// Creates an entry.
        package init(name: String, subscribers: Int, state: UInt64?, hasRetained: Bool) {
            self.name = name
            self.subscribers = subscribers
            self.state = state
            self.hasRetained = hasRetained
        }
    }

    /// One entry of the answer to `QUERY clients`.
    package struct Client: Codable, Sendable, Hashable {
        /// The connection's number, in the order the daemon accepted connections.
        package var connection: UInt64
        /// The client's process id, as the kernel reported it when it connected (0: another pid namespace).
        package var pid: UInt32
        /// The client's user id.
        package var uid: UInt32
        /// The client's primary group id.
        package var gid: UInt32
        /// The process's command name (`/proc/PID/comm`), when readable.
        package var command: String?
        /// The name the client gave in `HELLO` (the library sends the program's name by default).
        package var clientName: String
        /// The connection's subscriptions.
        package var subscriptions: Int
        /// Bytes queued for the client and not yet written to its socket.
        package var pendingBytes: Int
        /// Bytes of the notifications held for the client (it reads slowly, or is suspended).
        package var heldBytes: Int
        /// Whether the client has suspended its deliveries.
        package var suspended: Bool
        /// Notifications merged into later ones for this client under `coalesce`.
        package var merged: UInt64
        /// Notifications dropped for this client under `queue` or evicted by the bounds on held notifications.
        package var dropped: UInt64

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
        }

        /// Creates an entry.
        package init(
            connection: UInt64, pid: UInt32, uid: UInt32, gid: UInt32, command: String?, clientName: String,
            subscriptions: Int, pendingBytes: Int, heldBytes: Int, suspended: Bool, merged: UInt64, dropped: UInt64
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
        }
    }
}
