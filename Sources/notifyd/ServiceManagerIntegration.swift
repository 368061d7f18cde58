#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import NIOCore
import NotifyServer
import NotifySystemd
import ServiceLifecycle

/// The daemon's side of the service manager protocol, as a `Service` that runs next to the ``NotifyServer`` in
/// the same `ServiceGroup`:
///
/// - `READY=1` (with `MAINPID=` and a first `STATUS=`) once the server's socket accepts connections;
/// - `STATUS=` with ``ServiceStatus`` every `statusInterval`, from the server's snapshot;
/// - `WATCHDOG=1` every half `WATCHDOG_USEC`, scheduled on the server's event loop, so that a stuck loop stops
///   the pings and the service manager restarts the daemon;
/// - `STOPPING=1` as soon as graceful shutdown starts (it is listed after the server, so the group shuts it down
///   first).
///
/// It also reports the log rate limiter's suppressed-message counts every `statusInterval`. Outside a service
/// manager (`NOTIFY_SOCKET` unset) the notifications do nothing.
struct ServiceManagerIntegration: Service, CustomStringConvertible {
    let server: NotifyServer
    /// Yields the listening address once the server accepts connections.
    let listening: AsyncStream<String>
    let notifier: ServiceManagerNotifier
    let watchdog: ServiceWatchdog?
    let statusInterval: Duration
    let limiter: LogRateLimiter
    let logger: Logger
    /// Test-only: block the event loop after this long for a while (see ``EventLoopStallHook``).
    let stallHook: EventLoopStallHook?

    var description: String { "ServiceManagerIntegration" }

    func run() async throws {
        let address: String? = await cancelWhenGracefulShutdown { [listening] in
            for await address in listening { return address }
            return nil
        }
        if let address {
            var status = StatusSampler(server: server)
            let first = await status.sample()
            send("ready", { () throws(SystemdError) in try notifier.ready(status: first.description, mainPID: getpid()) })
            logger.debug("told the service manager READY=1", metadata: ["socket": "\(address)"])
            if let watchdog { startWatchdog(watchdog) }
            stallHook?.schedule(on: server.eventLoop, logger: logger)
            let interval = statusInterval
            try? await cancelWhenGracefulShutdown { [self, status] in
                var status = status
                while true {
                    try await Task.sleep(for: interval)
                    let current = await status.sample()
                    send("status", { () throws(SystemdError) in try notifier.status(current.description) })
                    RateLimitedLogHandler.logSuppressedSummaries(from: limiter, to: logger)
                }
            }
        }
        send("stopping", { () throws(SystemdError) in try notifier.stopping(status: "stopping: writing queued notifications, then closing") })
        RateLimitedLogHandler.logSuppressedSummaries(from: limiter, to: logger)
    }

    /// Pings from the event loop itself; the task lives until the loop shuts down with the server.
    private func startWatchdog(_ watchdog: ServiceWatchdog) {
        let notifier = self.notifier
        let logger = self.logger
        let interval = TimeAmount.nanoseconds(
            max(1_000_000, watchdog.pingInterval.components.seconds * 1_000_000_000
                + watchdog.pingInterval.components.attoseconds / 1_000_000_000))
        logger.debug("watchdog enabled", metadata: ["timeout": "\(watchdog.timeout)", "interval": "\(interval)"])
        server.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: interval) { _ in
            do {
                try notifier.watchdogPing()
            } catch {
                logger.warning("cannot ping the service manager's watchdog", metadata: ["error": "\(error)"])
            }
        }
    }

    private func send(_ what: String, _ body: () throws(SystemdError) -> Bool) {
        do {
            _ = try body()
        } catch {
            logger.warning("cannot notify the service manager", metadata: ["message": "\(what)", "error": "\(error)"])
        }
    }
}

/// Turns successive server snapshots into ``ServiceStatus`` values (the post rate needs the previous reading).
struct StatusSampler {
    let server: NotifyServer
    private var previousPosts: UInt64?
    private var previousTime = ContinuousClock.now

    init(server: NotifyServer) {
        self.server = server
    }

    mutating func sample() async -> ServiceStatus {
        guard let snapshot = await server.snapshot() else {
            return ServiceStatus(connections: 0, subscriptions: 0, notificationsPerSecond: 0)
        }
        let now = ContinuousClock.now
        let elapsed = now - previousTime
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = previousPosts.map { ServiceStatus.rate(from: $0, to: snapshot.posts, elapsedSeconds: seconds) } ?? 0
        previousPosts = snapshot.posts
        previousTime = now
        return ServiceStatus(
            connections: snapshot.clients.count, subscriptions: snapshot.clients.reduce(0) { $0 + $1.subscriptions },
            notificationsPerSecond: rate)
    }
}
