#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSystemd

/// The service manager's watchdog (`WatchdogSec=` in the unit; `WATCHDOG_USEC` and `WATCHDOG_PID` in the
/// environment, read with `sd_watchdog_enabled(3)`).
///
/// When it is enabled, the service must send `WATCHDOG=1` (``ServiceManagerNotifier/watchdogPing()``) more
/// often than ``timeout``; otherwise the manager considers it hung and restarts it. Send the pings from the
/// work loop that must stay responsive (notifyd schedules them on its event loop), so that a stuck loop stops
/// them.
package struct ServiceWatchdog: Sendable, Hashable {
    /// The time after which the service manager gives up on a silent service.
    package var timeout: Duration

    /// Creates a watchdog description with the given timeout.
    package init(timeout: Duration) {
        self.timeout = timeout
    }

    /// How often to ping: half the timeout, as `sd_watchdog_enabled(3)` recommends.
    package var pingInterval: Duration { timeout / 2 }

    /// The watchdog `environment` asks the process `pid` to serve (see ``fromEnvironment()``).
    package static func fromEnvironment(
        _ environment: [String: String], pid: Int32
    ) throws(SystemdError) -> ServiceWatchdog? {
        // The rules of sd_watchdog_enabled(3), on an explicit environment (tests must not change their own).
        guard let text = environment["WATCHDOG_USEC"] else { return nil }
        guard let microseconds = UInt64(text) else { throw SystemdError.watchdogConfigurationInvalid(errno: EINVAL) }
        if let owner = environment["WATCHDOG_PID"] {
            guard let ownerPID = Int32(owner), ownerPID > 0 else {
                throw SystemdError.watchdogConfigurationInvalid(errno: EINVAL)
            }
            if ownerPID != pid { return nil }
        }
        guard microseconds > 0 else { return nil }
        return ServiceWatchdog(timeout: .microseconds(Int64(clamping: microseconds)))
    }

    /// The watchdog the service manager asked this process to serve.
    ///
    /// - Returns: `nil` when no watchdog is enabled for this process (`WATCHDOG_USEC` unset or 0, or
    ///   `WATCHDOG_PID` names another process).
    /// - Throws: ``SystemdError/watchdogConfigurationInvalid(errno:)`` when the variables are malformed.
    package static func fromEnvironment() throws(SystemdError) -> ServiceWatchdog? {
        var microseconds: UInt64 = 0
        let result = sd_watchdog_enabled(0, &microseconds)
        if result < 0 { throw SystemdError.watchdogConfigurationInvalid(errno: -result) }
        guard result > 0, microseconds > 0 else { return nil }
        return ServiceWatchdog(timeout: .microseconds(Int64(clamping: microseconds)))
    }
}
