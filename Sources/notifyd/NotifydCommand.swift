#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ArgumentParser
import Logging
import NotifyServer
import NotifySystemd
import NotifyWire
import ServiceLifecycle

@main
struct NotifydCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notifyd",
        abstract: "The notifyd notification daemon.",
        discussion: """
            Listens on a Unix socket; programs post notifications by name and every subscriber of that name \
            receives them. Socket: --socket, else $NOTIFYD_SOCKET, else /run/notifyd/notifyd.sock for root and \
            $XDG_RUNTIME_DIR/notifyd/notifyd.sock for other users. Stops cleanly on SIGTERM or SIGINT: queued \
            notifications are written, then clients are told to reconnect later.

            Under systemd: serves the socket passed by a .socket unit (LISTEN_FDS) instead of binding, and never \
            removes it; reports READY=1, STATUS=, STOPPING=1 and watchdog pings (WatchdogSec=) through \
            NOTIFY_SOCKET; logs to the journal when its standard error is connected to it (JOURNAL_STREAM).
            """,
        version: NotifyServer.version
    )

    @Option(name: .long, help: "The Unix socket path to listen on.")
    var socket: String?

    @Option(
        name: .long,
        help: "Octal permission bits for the socket file (default: 666 as root, so every user can connect; 600 otherwise).")
    var socketMode: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The configuration file (reserved name prefixes, per-user quotas); SIGHUP re-reads it.",
            discussion: """
                Default: /etc/notifyd/notifyd.conf for the system daemon, else \
                $XDG_CONFIG_HOME/notifyd/notifyd.conf (~/.config/notifyd/notifyd.conf); a missing default file means \
                the defaults, and SIGHUP looks for it again.
                """))
    var config: String?

    @Option(name: .long, help: "Largest notification payload in bytes.")
    var maxPayload: UInt32 = ServerLimits.default.maxPayloadLength

    @Option(name: .long, help: "Most bytes queued for one client before its notifications are dropped and counted.")
    var outboundLimit: Int = 8 * 1024 * 1024

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A Unix socket to serve metrics on (Prometheus text format, written on connect, then closed).",
            discussion: """
                Under systemd, notifyd-metrics.socket passes it instead (FileDescriptorName=metrics). A scraper sees \
                per-user charges and the connections furthest behind for its own uid only, all of them as root.
                """))
    var metricsSocket: String?

    @Option(
        name: .long,
        help: "Also serve the metrics over HTTP at HOST:PORT (loopback only, e.g. 127.0.0.1:9479); off by default.")
    var metricsListen: String?

    @Flag(
        name: .long,
        help: ArgumentHelp(
            "Take over from the daemon running on this socket without dropping a client.",
            discussion: """
                The running daemon hands its state and every connection (with SCM_RIGHTS) to this one and exits;                 clients notice nothing. With no daemon running, starts afresh. Under systemd, restart the unit                 instead (systemctl restart notifyd): the state travels through its file descriptor store.
                """))
    var replace = false

    @Flag(
        name: .long,
        help: ArgumentHelp(
            "For the unit's ExecStop=: tell the daemon on --socket whether systemd is restarting it, then exit.",
            discussion: """
                Run as root (ExecStop=+...) before systemd signals the daemon: asks the manager which job runs and \
                leaves the answer in SOCKET.restart, so a restart hands every connection over instead of saying \
                GOODBYE.
                """))
    var announceStop = false

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    @Option(
        name: .long,
        help: "Where to log: stderr, journal (structured entries), or auto (the journal when standard error is connected to it).")
    var log: LogDestination = .auto

    @Option(name: .long, help: ArgumentHelp("Seconds between STATUS= updates to the service manager.", visibility: .hidden))
    var statusInterval: Double = 5

    @Option(name: .long, help: ArgumentHelp("Test only: block the event loop this many seconds after READY=1.", visibility: .private))
    var testStallEventLoopAfter: Double?

    @Option(name: .long, help: ArgumentHelp("Test only: how long the event loop stays blocked.", visibility: .private))
    var testStallEventLoopSeconds: Double = 5

    func validate() throws {
        if let socketMode, UInt32(socketMode, radix: 8) == nil || UInt32(socketMode, radix: 8)! > 0o777 {
            throw ValidationError("--socket-mode must be octal permission bits such as 600 or 666, got '\(socketMode)'")
        }
        guard maxPayload >= 1, maxPayload <= 16 * 1024 * 1024 else {
            throw ValidationError("--max-payload must be between 1 and 16777216 bytes")
        }
        guard outboundLimit >= 64 * 1024 else {
            throw ValidationError("--outbound-limit must be at least 65536 bytes")
        }
        if let metricsListen {
            guard let (host, port) = Self.hostAndPort(metricsListen) else {
                throw ValidationError("--metrics-listen must be HOST:PORT, got '\(metricsListen)'")
            }
            guard ["127.0.0.1", "::1", "localhost"].contains(host) else {
                throw ValidationError("--metrics-listen serves loopback only (127.0.0.1, ::1 or localhost), got '\(host)'")
            }
            guard (1...65_535).contains(port) else { throw ValidationError("--metrics-listen: port \(port) is out of range") }
        }
        guard statusInterval >= 0.05 else {
            throw ValidationError("--status-interval must be at least 0.05 seconds")
        }
    }

    /// `HOST:PORT` (the host may be `[::1]`).
    static func hostAndPort(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]) else { return nil }
        let host = text[..<colon].trimmingCharacters(in: ["[", "]"])
        return host.isEmpty ? nil : (host, port)
    }

    /// Raises the soft limit on open files to the hard one: each client is a descriptor, and the usual soft
    /// limit of 1,024 is four users at their default connection quota. Under systemd the unit's `LimitNOFILE=`
    /// sets both (its system call filter refuses `setrlimit`, which is then harmless).
    static func raiseDescriptorLimit(logger: Logger) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        let soft = limit.rlim_cur
        limit.rlim_cur = limit.rlim_max
        if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 {
            logger.debug("raised the open file limit", metadata: ["from": "\(soft)", "to": "\(limit.rlim_max)"])
        } else {
            logger.notice(
                "cannot raise the open file limit; new clients are refused with ERROR unavailable once it is reached",
                metadata: ["limit": "\(soft)", "error": "\(String(cString: strerror(errno)))"])
        }
    }

    func run() async throws {
        if announceStop {
            let environment = ProcessEnvironment.current
            StopAnnouncement.announce(
                socketPath: socket ?? SocketLocation.defaultPath(uid: getuid(), environment: environment),
                environment: environment)
            return
        }
        ConfigurationReloader.ignoreHangupUntilTrapped()
        let environment = ProcessEnvironment.current
        let limiter = LogRateLimiter()
        log.resolved(environment: environment).bootstrap(level: logLevel, limiter: limiter)
        let logger = Logger(label: "notifyd")

        Self.raiseDescriptorLimit(logger: logger)
        NotifyServer.fixAllocatorThresholds(environment: environment)
        let uid = getuid()
        let path = socket ?? SocketLocation.defaultPath(uid: uid, environment: environment)
        let mode = socketMode.flatMap { UInt32($0, radix: 8) } ?? (uid == 0 ? 0o666 : 0o600)
        var listenAddress: ListenAddress
        var handover: IncomingHandover?
        var metricsAddress: ListenAddress?
        let stored: [InheritedSocket]
        let watchdog: ServiceWatchdog?
        do throws(SystemdError) {
            (listenAddress, stored, metricsAddress) = try Self.listenAddress(
                defaultPath: path, explicitPath: socket, logger: logger)
            watchdog = try ServiceWatchdog.fromEnvironment()
        } catch {
            logger.critical("\(error.description)")
            throw ExitCode(1)
        }

        // The configuration is read before anything is taken over from a predecessor: a file that does not parse
        // stops this process while the clients' sockets are still the predecessor's (--replace) or still in the
        // service manager's store, not after they were taken and would close with it.
        let configSource = ConfigurationSource.resolve(
            explicit: config, isSystemDaemon: Self.isSystemDaemon(listenAddress), environment: environment)
        var access = AccessConfiguration()
        do throws(ConfigurationError) {
            if let loaded = try configSource.load() {
                access = loaded
                logger.info("configuration loaded", metadata: ["config": "\(configSource)", "rules": "\(access.rules.count)"])
            }
        } catch {
            logger.critical("invalid configuration: \(error.description)")
            throw ExitCode(1)
        }

        if !stored.isEmpty { handover = StoreHandover.take(from: stored, logger: logger).0 }
        let fromStore = handover != nil
        if replace {
            if case .inheritedDescriptor = listenAddress {
                logger.warning("--replace is ignored for a socket passed by systemd: restart the unit instead")
            } else {
                do throws(ReplaceChannel.Failure) {
                    if let (taken, listener) = try ReplaceChannel.takeOver(controlPath: ReplaceChannel.controlPath(for: path)) {
                        handover = taken
                        listenAddress = .inheritedDescriptor(listener, path: path)
                    } else {
                        logger.notice("--replace: no daemon is running at \(path); starting afresh")
                    }
                } catch {
                    logger.critical("--replace: \(error.description)")
                    throw ExitCode(1)
                }
            }
        }
        // Under a service manager that starts it from a socket unit, a restart hands the state over through the
        // file descriptor store.
        let isManaged = environment["NOTIFY_SOCKET"] != nil
        var isSocketActivated = false
        if case .inheritedDescriptor = listenAddress, !replace { isSocketActivated = true }

        var limits = ServerLimits.default
        limits.maxPayloadLength = maxPayload
        limits.maxFrameLength = max(limits.maxFrameLength, maxPayload + 1_024)
        var configuration = ServerConfiguration(
            listenAddress: listenAddress, socketMode: mode, limits: limits, outboundByteLimit: outboundLimit,
            access: access)
        configuration.metricsAddress = metricsAddress ?? metricsSocket.map { .path($0) }
        configuration.metricsHTTP = metricsListen.flatMap(Self.hostAndPort).map { (host: $0.0, port: $0.1) }

        let (listening, listeningContinuation) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let server = NotifyServer(
            configuration: configuration, logger: logger, handover: handover,
            stopHandover: isManaged && isSocketActivated ? StoreHandover(logger: logger, socketPath: listenAddress.path) : nil
        ) { address in
            // The new process serves what the store held: the store lets go of it.
            if fromStore { StoreHandover.removeStored() }
            listeningContinuation.yield(address)
            listeningContinuation.finish()
        }
        let integration = ServiceManagerIntegration(
            server: server, listening: listening, notifier: ServiceManagerNotifier(), watchdog: watchdog,
            statusInterval: .milliseconds(Int64(statusInterval * 1_000)), limiter: limiter, logger: logger,
            stallHook: testStallEventLoopAfter.map { EventLoopStallHook(after: $0, duration: testStallEventLoopSeconds) })
        // Graceful shutdown runs in reverse order: the integration says STOPPING=1 first, then the server drains.
        let services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            // A server that handed everything to a successor returns on its own: the rest then stops too.
            .init(service: server, successTerminationBehavior: .gracefullyShutdownGroup), .init(service: integration),
            .init(
                service: ConfigurationReloader(
                    source: configSource, server: server, notifier: ServiceManagerNotifier(), logger: logger)),
        ]
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: services,
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        do {
            try await group.run()
        } catch let error as ServerError {
            logger.critical("\(error.description)")
            throw ExitCode(1)
        }
    }

    /// The system daemon serves the system socket; it reads `/etc/notifyd/notifyd.conf` by default.
    private static func isSystemDaemon(_ address: ListenAddress) -> Bool {
        switch address {
        case .path(let bound): bound == SocketLocation.systemPath
        case .inheritedDescriptor(_, let inherited): inherited == SocketLocation.systemPath
        }
    }

    /// The socket passed by the service manager (socket activation), else `defaultPath` to bind.
    /// The sockets a predecessor left in systemd's file descriptor store are set apart (`stored`), not yet opened.
    /// The metrics socket a `notifyd-metrics.socket` passes (`FileDescriptorName=metrics`) is taken too.
    private static func listenAddress(defaultPath: String, explicitPath: String?, logger: Logger) throws(SystemdError)
        -> (ListenAddress, stored: [InheritedSocket], metrics: ListenAddress?)
    {
        let (stored, passed) = StoreHandover.partition(try SocketActivation.takeInheritedSockets())
        let metrics = passed.first { $0.name == "metrics" && $0.isListeningUnixStream }
            .map { ListenAddress.inheritedDescriptor($0.descriptor, path: $0.path) }
        let inherited = passed.filter { $0.name != "metrics" }
        guard let chosen = try SocketActivation.choose(from: inherited, preferredName: "notifyd") else {
            return (.path(defaultPath), stored, metrics)
        }
        for other in inherited where other != chosen {
            logger.warning("ignoring an extra socket passed by the service manager", metadata: ["socket": "\(other)"])
        }
        if let explicitPath, explicitPath != chosen.path {
            logger.notice(
                "serving the socket passed by the service manager instead of --socket",
                metadata: ["socket": "\(chosen)", "ignored": "\(explicitPath)"])
        }
        logger.info("socket-activated", metadata: ["socket": "\(chosen)"])
        return (.inheritedDescriptor(chosen.descriptor, path: chosen.path), stored, metrics)
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

enum ProcessEnvironment {
    static var current: [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let separator = text.firstIndex(of: "=") {
                result[String(text[..<separator])] = String(text[text.index(after: separator)...])
            }
            pointer += 1
        }
        return result
    }
}
