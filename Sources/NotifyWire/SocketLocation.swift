/// Where the daemon listens and where clients look for it (`protocol/PROTOCOL.md` § Transport).
package enum SocketLocation {
    /// The environment variable that overrides the socket path for clients and the daemon.
    package static let environmentVariable = "NOTIFYD_SOCKET"

    /// The system daemon's socket, used by root.
    package static let systemPath = "/run/notifyd/notifyd.sock"

    /// The socket path used when neither `--socket` nor ``environmentVariable`` says otherwise:
    /// ``systemPath`` for uid 0, `$XDG_RUNTIME_DIR/notifyd/notifyd.sock` for other users, and
    /// `/tmp/notifyd-UID/notifyd.sock` when `XDG_RUNTIME_DIR` is not set.
    package static func defaultPath(uid: UInt32, environment: [String: String]) -> String {
        if let explicit = environment[environmentVariable], !explicit.isEmpty { return explicit }
        if uid == 0 { return systemPath }
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            return runtime + "/notifyd/notifyd.sock"
        }
        return "/tmp/notifyd-\(uid)/notifyd.sock"
    }
}
