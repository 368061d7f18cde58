import NotifyWire

/// The credentials of the process that posted a notification, as the daemon's kernel reported them for the
/// poster's socket (`SO_PEERCRED`): verified, not claimed by the poster.
public struct SenderCredentials: Sendable, Hashable, CustomStringConvertible {
    /// The poster's process id, as seen from the daemon's pid namespace (0: a process in another one).
    public var pid: UInt32
    /// The poster's user id.
    public var uid: UInt32
    /// The poster's group id.
    public var gid: UInt32

    /// Creates a set of credentials.
    public init(pid: UInt32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// The credentials a notification frame carries.
    init(_ wire: NotifyWire.SenderCredentials) {
        self.init(pid: wire.pid, uid: wire.uid, gid: wire.gid)
    }

    /// How this reads in logs and error messages: `pid 1234 uid 1000 gid 1000`.
    public var description: String { "pid \(pid) uid \(uid) gid \(gid)" }
}
