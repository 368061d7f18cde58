import NotifyWire

/// Where a notification relayed from another host was first posted, as the relay (`notifyd-bridge`) reports it.
///
/// A relayed notification's ``ReceivedNotification/sender`` is the relay's own process, checked by the kernel;
/// this is what the relay says about the original poster on its host. Trust it as far as you trust the relay's
/// user (``ReceivedNotification/sender``'s uid) and the hosts it bridges.
public struct NotificationOrigin: Sendable, Hashable, CustomStringConvertible {
    /// The origin host's id (the bridge's `--host-id`, by default its `/etc/machine-id`).
    public var host: String
    /// The poster's uid on that host.
    public var uid: UInt32
    /// The poster's gid on that host.
    public var gid: UInt32
    /// The poster's pid on that host.
    public var pid: UInt32
    /// The sequence number that host's daemon gave the post.
    public var sequence: UInt64

    /// Creates an origin.
    public init(host: String, uid: UInt32, gid: UInt32, pid: UInt32, sequence: UInt64) {
        self.host = host
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.sequence = sequence
    }

    init(_ wire: RelayOrigin) {
        self.init(host: wire.host, uid: wire.uid, gid: wire.gid, pid: wire.pid, sequence: wire.sequence)
    }

    var wire: RelayOrigin { RelayOrigin(host: host, uid: uid, gid: gid, pid: pid, sequence: sequence) }

    /// How this reads in logs: `host web-1 pid 1234 uid 1000 gid 1000 sequence 42`.
    public var description: String { "host \(host) pid \(pid) uid \(uid) gid \(gid) sequence \(sequence)" }
}
