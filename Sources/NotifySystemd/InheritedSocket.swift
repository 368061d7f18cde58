/// A listening socket passed to this process by the service manager (socket activation).
package struct InheritedSocket: Sendable, Hashable, CustomStringConvertible {
    /// The file descriptor, already open and listening. It has `FD_CLOEXEC` set.
    package var descriptor: Int32
    /// The name given by `FileDescriptorName=` in the `.socket` unit (`systemd-socket-activate` passes none;
    /// libsystemd then reports `unknown`).
    package var name: String
    /// The file system path the socket is bound to, when it is a Unix socket with a path (not abstract or
    /// unnamed).
    package var path: String?
    /// Whether it is a listening Unix stream socket, the only kind notifyd serves.
    package var isListeningUnixStream: Bool

    /// Creates a description of an inherited socket.
    package init(descriptor: Int32, name: String, path: String?, isListeningUnixStream: Bool) {
        self.descriptor = descriptor
        self.name = name
        self.path = path
        self.isListeningUnixStream = isListeningUnixStream
    }

    /// How this reads in logs and error messages.
    package var description: String {
        "fd \(descriptor) '\(name)'" + (path.map { " at \($0)" } ?? "")
            + (isListeningUnixStream ? "" : " (not a listening Unix stream socket)")
    }
}
