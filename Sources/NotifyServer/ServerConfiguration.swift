import NotifyWire

/// Everything a ``NotifyServer`` needs to know before it starts.
package struct ServerConfiguration: Sendable {
    /// Where to listen.
    package var listenAddress: ListenAddress
    /// The permission bits given to a socket file the server creates (e.g. `0o666` so every local user can
    /// connect, `0o600` for the owner only).
    package var socketMode: UInt32
    /// The limits announced in `WELCOME` and enforced on every request.
    package var limits: ServerLimits
    /// The most bytes queued for one connection (not yet written to its socket). Past it, the connection's
    /// notifications are held under each subscription's policy (coalesce, queue or disconnect), and what is
    /// held is bounded by the same number (`protocol/PROTOCOL.md` § 9.4).
    package var outboundByteLimit: Int
    /// The daemon's name and version, sent in `WELCOME`.
    package var serverName: String
    /// How long a graceful shutdown waits for queued notifications to be written before closing anyway.
    package var shutdownDeadlineSeconds: Double
    /// Reserved name prefixes and per-user quotas.
    package var access: AccessConfiguration
    /// How a new client's groups and command name are found (off the event loop).
    package var identityLookup: PeerIdentityLookup
    /// Where to serve metrics (Prometheus text, written on connection, then closed), if anywhere.
    package var metricsAddress: ListenAddress?
    /// A loopback TCP port to serve the metrics over HTTP on, if any (`host`, `port`).
    package var metricsHTTP: (host: String, port: Int)?

    /// Creates a configuration.
    package init(
        listenAddress: ListenAddress,
        socketMode: UInt32 = 0o600,
        limits: ServerLimits = .default,
        outboundByteLimit: Int = 8 * 1024 * 1024,
        serverName: String = "notifyd \(NotifyServer.version)",
        shutdownDeadlineSeconds: Double = 5,
        access: AccessConfiguration = AccessConfiguration(),
        identityLookup: PeerIdentityLookup = .system
    ) {
        self.identityLookup = identityLookup
        self.access = access
        self.listenAddress = listenAddress
        self.socketMode = socketMode
        self.limits = limits
        self.outboundByteLimit = outboundByteLimit
        self.serverName = serverName
        self.shutdownDeadlineSeconds = shutdownDeadlineSeconds
    }
}

/// Where the server accepts connections.
package enum ListenAddress: Sendable, Hashable, CustomStringConvertible {
    /// Bind a Unix stream socket at this path (creating its directory; replacing a stale socket file, but never
    /// one a live daemon is listening on). The file is removed when the server stops.
    case path(String)
    /// Serve an already-listening socket inherited from the service manager (socket activation). Its file, if
    /// any, is not the server's to remove.
    case inheritedDescriptor(Int32, path: String?)

    /// The socket's path, when it has one.
    package var path: String? {
        switch self {
        case .path(let path): path
        case .inheritedDescriptor(_, let path): path
        }
    }

    /// How this reads in logs and error messages.
    package var description: String {
        switch self {
        case .path(let path): path
        case .inheritedDescriptor(let fd, let path): path ?? "inherited fd \(fd)"
        }
    }
}
