import CSystemd

/// Talks to the service manager through `sd_notify(3)` (`READY=1`, `STATUS=…`, `STOPPING=1`, `WATCHDOG=1`).
///
/// When the process was not started by a service manager (`NOTIFY_SOCKET` unset), every call does nothing.
public struct ServiceManagerNotifier: Sendable {
    /// Creates a notifier.
    public init() {}

    /// Sends a newline-separated list of `KEY=VALUE` assignments.
    ///
    /// - Returns: `true` if a service manager received it, `false` if none is listening.
    /// - Throws: ``SystemdError/notifyFailed(_:)`` if sending failed.
    @discardableResult
    public func send(_ assignments: String) throws(SystemdError) -> Bool {
        let result = sd_notify(0, assignments)
        if result < 0 { throw SystemdError.notifyFailed(errno: -result) }
        return result > 0
    }

    /// Tells the service manager the daemon is ready to serve.
    @discardableResult
    public func ready(status: String? = nil) throws(SystemdError) -> Bool {
        try send("READY=1" + (status.map { "\nSTATUS=" + $0 } ?? ""))
    }

    /// Tells the service manager the daemon is stopping.
    @discardableResult
    public func stopping() throws(SystemdError) -> Bool {
        try send("STOPPING=1")
    }
}

/// Failures of libsystemd calls.
public enum SystemdError: Error, Sendable, CustomStringConvertible {
    /// `sd_notify` failed with this errno.
    case notifyFailed(errno: Int32)

    public var description: String {
        switch self {
        case .notifyFailed(let code): "sd_notify failed with errno \(code)"
        }
    }
}
