#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import NIOCore

/// Test-only (hidden options `--test-stall-event-loop-after` and `--test-stall-event-loop-seconds`): blocks the
/// server's event loop with a sleep, to show that the systemd watchdog pings stop while the loop is stuck.
struct EventLoopStallHook: Sendable {
    /// Seconds after `READY=1` before the stall starts.
    var after: Double
    /// How long the loop stays blocked.
    var duration: Double

    /// The line logged (at warning level, from the loop itself) right before the loop blocks.
    static let announcement = "test hook: stalling the event loop"

    func schedule(on eventLoop: any EventLoop, logger: Logger) {
        let duration = self.duration
        eventLoop.scheduleTask(in: .nanoseconds(Int64(after * 1e9))) {
            logger.warning("\(Self.announcement)", metadata: ["seconds": "\(duration)"])
            var request = timespec(tv_sec: Int(duration), tv_nsec: Int((duration - duration.rounded(.down)) * 1e9))
            var remaining = timespec()
            while nanosleep(&request, &remaining) != 0, errno == EINTR { request = remaining }
            logger.warning("test hook: event loop released")
        }
    }
}
