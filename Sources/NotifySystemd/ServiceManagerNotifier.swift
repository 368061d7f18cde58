import CSystemd

/// Talks to the service manager through `sd_notify(3)`: `READY=1`, `STATUS=…`, `STOPPING=1`, `WATCHDOG=1`,
/// `MAINPID=…`.
///
/// libsystemd's formatting variant (`sd_notifyf`) is variadic and unavailable from Swift, so every message is a
/// preformatted string of newline-separated `KEY=VALUE` assignments. When the process was not started by a
/// service manager (`NOTIFY_SOCKET` unset), every call does nothing and returns `false`.
public struct ServiceManagerNotifier: Sendable {
    /// Creates a notifier.
    public init() {}

    /// Sends a newline-separated list of `KEY=VALUE` assignments.
    ///
    /// - Returns: `true` if the message was sent to a service manager, `false` if none is listening
    ///   (`NOTIFY_SOCKET` unset).
    /// - Throws: ``SystemdError/notifyFailed(errno:)`` if sending failed.
    @discardableResult
    public func send(_ assignments: String) throws(SystemdError) -> Bool {
        let result = sd_notify(0, assignments)
        if result < 0 { throw SystemdError.notifyFailed(errno: -result) }
        return result > 0
    }

    /// Tells the service manager the daemon is ready to serve (`READY=1`), with its main pid and an optional
    /// status line.
    @discardableResult
    public func ready(status: String? = nil, mainPID: Int32? = nil) throws(SystemdError) -> Bool {
        var lines = ["READY=1"]
        if let status { lines.append("STATUS=" + Self.singleLine(status)) }
        if let mainPID { lines.append("MAINPID=\(mainPID)") }
        return try send(lines.joined(separator: "\n"))
    }

    /// Updates the one-line status shown by `systemctl status` (`STATUS=`).
    @discardableResult
    public func status(_ text: String) throws(SystemdError) -> Bool {
        try send("STATUS=" + Self.singleLine(text))
    }

    /// Tells the service manager the daemon is alive (`WATCHDOG=1`); see ``ServiceWatchdog``.
    @discardableResult
    public func watchdogPing() throws(SystemdError) -> Bool {
        try send("WATCHDOG=1")
    }

    /// Tells the service manager the daemon is stopping (`STOPPING=1`), with an optional status line.
    @discardableResult
    public func stopping(status: String? = nil) throws(SystemdError) -> Bool {
        try send("STOPPING=1" + (status.map { "\nSTATUS=" + Self.singleLine($0) } ?? ""))
    }

    /// A newline would start a new assignment: status texts are flattened to one line.
    static func singleLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }
}
