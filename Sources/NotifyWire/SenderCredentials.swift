/// Who posted a notification, as the daemon's kernel reported it for the poster's socket (`SO_PEERCRED`).
package struct SenderCredentials: Sendable, Hashable, CustomStringConvertible {
    /// The poster's process id.
    package var pid: UInt32
    /// The poster's user id.
    package var uid: UInt32
    /// The poster's group id.
    package var gid: UInt32

    /// Creates a set of credentials.
    @inlinable
    package init(pid: UInt32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// How this reads in logs and error messages.
    package var description: String { "pid \(pid) uid \(uid) gid \(gid)" }
}
