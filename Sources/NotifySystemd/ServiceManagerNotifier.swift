#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSystemd

/// Talks to the service manager through `sd_notify(3)`: `READY=1`, `STATUS=…`, `STOPPING=1`, `WATCHDOG=1`,
/// `MAINPID=…`.
///
/// libsystemd's formatting variant (`sd_notifyf`) is variadic and unavailable from Swift, so every message is a
/// preformatted string of newline-separated `KEY=VALUE` assignments. When the process was not started by a
/// service manager (`NOTIFY_SOCKET` unset), every call does nothing and returns `false`.
package struct ServiceManagerNotifier: Sendable {
    /// Where messages go: `nil` for `sd_notify(3)` and the process's `NOTIFY_SOCKET`; otherwise the
    /// `NOTIFY_SOCKET` of an explicit environment (`.some(nil)`: none).
    private let explicitSocket: String??

    /// Creates a notifier for this process's service manager (`NOTIFY_SOCKET` in its environment).
    package init() {
        explicitSocket = nil
    }

    /// Creates a notifier that reads `NOTIFY_SOCKET` from `environment` rather than from the process's own
    /// environment, which tests running in parallel with others must not change.
    package init(environment: [String: String]) {
        explicitSocket = .some(environment["NOTIFY_SOCKET"])
    }

    /// Sends a newline-separated list of `KEY=VALUE` assignments.
    ///
    /// - Returns: `true` if the message was sent to a service manager, `false` if none is listening
    ///   (`NOTIFY_SOCKET` unset).
    /// - Throws: ``SystemdError/notifyFailed(errno:)`` if sending failed.
    @discardableResult
    package func send(_ assignments: String) throws(SystemdError) -> Bool {
        guard let explicitSocket else {
            let result = sd_notify(0, assignments)
            if result < 0 { throw SystemdError.notifyFailed(errno: -result) }
            return result > 0
        }
        guard let path = explicitSocket else { return false }
        try Self.sendDatagram(assignments, to: path)
        return true
    }

    /// What `sd_notify` does with the socket it found: one datagram to a Unix socket path (`@` for the
    /// abstract namespace).
    private static func sendDatagram(_ message: String, to path: String) throws(SystemdError) {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemdError.notifyFailed(errno: errno) }
        defer { close(fd) }
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
        let sent = Array(message.utf8).withUnsafeBytes { payload in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, payload.baseAddress, payload.count, Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
        if sent < 0 { throw SystemdError.notifyFailed(errno: errno) }
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
