#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSystemd

/// Talks to the service manager through its notification socket (`sd_notify(3)`'s protocol): `READY=1`,
/// `STATUS=…`, `STOPPING=1`, `WATCHDOG=1`, `MAINPID=…`.
///
/// Every message is a preformatted string of newline-separated `KEY=VALUE` assignments. When the process was not
/// started by a service manager (`NOTIFY_SOCKET` unset), every call does nothing and returns `false`.
///
/// The datagram socket is opened once, when the notifier is made: `sd_notify` opens one per message, which fails
/// with `EMFILE` once the daemon's descriptor table is full of clients; the watchdog's pings would then stop, and
/// systemd would kill a daemon that is serving every client it has. Addresses other than a path (`vsock:`) go
/// through `sd_notify`.
package struct ServiceManagerNotifier: Sendable {
    private enum Destination {
        /// `NOTIFY_SOCKET` unset: nothing to tell.
        case none
        /// A Unix socket path (`@` for the abstract namespace), through the socket opened for it.
        case path(NotificationSocket)
        /// An address only `sd_notify` knows how to reach.
        case libsystemd
    }

    private let destination: Destination

    /// Creates a notifier for this process's service manager (`NOTIFY_SOCKET` in its environment).
    package init() {
        self.init(socket: getenv("NOTIFY_SOCKET").map { String(cString: $0) })
    }

    /// Creates a notifier that reads `NOTIFY_SOCKET` from `environment` rather than from the process's own
    /// environment, which tests running in parallel with others must not change.
    package init(environment: [String: String]) {
        self.init(socket: environment["NOTIFY_SOCKET"])
    }

    private init(socket address: String?) {
        guard let address, !address.isEmpty else {
            destination = .none
            return
        }
        guard address.hasPrefix("/") || address.hasPrefix("@") else {
            destination = .libsystemd
            return
        }
        destination = .path(NotificationSocket(path: address))
    }

    /// Sends a newline-separated list of `KEY=VALUE` assignments.
    ///
    /// - Returns: `true` if the message was sent to a service manager, `false` if none is listening
    ///   (`NOTIFY_SOCKET` unset).
    /// - Throws: ``SystemdError/notifyFailed(errno:)`` if sending failed.
    @discardableResult
    package func send(_ assignments: String) throws(SystemdError) -> Bool {
        switch destination {
        case .none:
            return false
        case .path(let socket):
            try socket.send(assignments)
            return true
        case .libsystemd:
            let result = sd_notify(0, assignments)
            if result < 0 { throw SystemdError.notifyFailed(errno: -result) }
            return result > 0
        }
    }

    /// Tells the service manager the daemon is ready to serve (`READY=1`), with its main pid and an optional
    /// status line.
    @discardableResult
    package func ready(status: String? = nil, mainPID: Int32? = nil) throws(SystemdError) -> Bool {
        var lines = ["READY=1"]
        if let status { lines.append("STATUS=" + Self.singleLine(status)) }
        if let mainPID { lines.append("MAINPID=\(mainPID)") }
        return try send(lines.joined(separator: "\n"))
    }

    /// Updates the one-line status shown by `systemctl status` (`STATUS=`).
    @discardableResult
    package func status(_ text: String) throws(SystemdError) -> Bool {
        try send("STATUS=" + Self.singleLine(text))
    }

    /// Tells the service manager the daemon is alive (`WATCHDOG=1`); see ``ServiceWatchdog``.
    @discardableResult
    package func watchdogPing() throws(SystemdError) -> Bool {
        try send("WATCHDOG=1")
    }

    /// Tells the service manager the daemon is stopping (`STOPPING=1`), with an optional status line.
    @discardableResult
    package func stopping(status: String? = nil) throws(SystemdError) -> Bool {
        try send("STOPPING=1" + (status.map { "\nSTATUS=" + Self.singleLine($0) } ?? ""))
    }

    /// A newline would start a new assignment: status texts are flattened to one line.
    static func singleLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }
}

/// A datagram socket opened once for the service manager's notification socket, and the address it sends to.
///
/// Unconnected: each message is addressed by path, so a manager that re-created its socket (`systemctl
/// daemon-reexec`) is reached at the new one.
private final class NotificationSocket: Sendable {
    /// `-1` when it could not be opened; each send then tries again.
    private let descriptor: CInt
    private let path: String

    init(path: String) {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
    }

    func send(_ message: String) throws(SystemdError) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw SystemdError.notifyFailed(errno: ENAMETOOLONG)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        var fd = descriptor
        if fd < 0 {
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw SystemdError.notifyFailed(errno: errno) }
        }
        defer { if fd != descriptor { close(fd) } }
        let sent = Array(message.utf8).withUnsafeBytes { payload in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, payload.baseAddress, payload.count, Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
        if sent < 0 { throw SystemdError.notifyFailed(errno: errno) }
    }
}
