#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Failures of libsystemd calls.
package enum SystemdError: Error, Sendable, Hashable, CustomStringConvertible {
    /// `sd_notify` failed with this errno (the service manager's socket could not be reached).
    case notifyFailed(errno: Int32)
    /// `sd_listen_fds_with_names` failed with this errno (malformed `LISTEN_FDS`/`LISTEN_PID` environment).
    case listenDescriptorsUnavailable(errno: Int32)
    /// The service manager passed sockets, but none of them is a listening Unix stream socket.
    case noUsableListenSocket(passed: Int)
    /// `sd_watchdog_enabled` failed with this errno (malformed `WATCHDOG_USEC`/`WATCHDOG_PID`).
    case watchdogConfigurationInvalid(errno: Int32)
    /// Storing descriptors in the service manager's file descriptor store failed with this errno.
    case fileDescriptorStoreFailed(errno: Int32)
    /// Asking the service manager over D-Bus about this service failed.
    case serviceQueryFailed(String)

    /// How this reads in logs and error messages.
    package var description: String {
        switch self {
        case .notifyFailed(let code):
            "cannot notify the service manager (sd_notify): \(SystemdError.describe(errno: code))"
        case .listenDescriptorsUnavailable(let code):
            "cannot take the sockets passed by the service manager (LISTEN_FDS): \(SystemdError.describe(errno: code))"
        case .noUsableListenSocket(let passed):
            "the service manager passed \(passed) file descriptor(s), but none is a listening Unix stream socket; "
                + "check ListenStream= in the .socket unit"
        case .watchdogConfigurationInvalid(let code):
            "invalid watchdog settings (WATCHDOG_USEC/WATCHDOG_PID): \(SystemdError.describe(errno: code))"
        case .fileDescriptorStoreFailed(let code):
            "cannot store descriptors in the service manager (FDSTORE=1): \(SystemdError.describe(errno: code))"
        case .serviceQueryFailed(let what):
            "cannot ask the service manager about this service: \(what)"
        }
    }

    static func describe(errno code: Int32) -> String {
        guard let text = strerror(code) else { return "errno \(code)" }
        return String(cString: text)
    }
}
