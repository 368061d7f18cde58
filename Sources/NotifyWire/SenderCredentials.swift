/// Who posted a notification, as the daemon's kernel reported it for the poster's socket (`SO_PEERCRED`).
public struct SenderCredentials: Sendable, Hashable, CustomStringConvertible {
    /// The poster's process id.
    public var pid: UInt32
    /// The poster's user id.
    public var uid: UInt32
    /// The poster's group id.
    public var gid: UInt32

    /// Creates a set of credentials.
    @inlinable
    public init(pid: UInt32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// How this reads in logs and error messages.
    public var description: String { "pid \(pid) uid \(uid) gid \(gid)" }
}
