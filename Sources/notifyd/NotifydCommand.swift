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
            $XDG_RUNTIME_DIR/notifyd/notifyd.sock for other users. Stops cleanly on SIGTERM or SIGINT.
            """,
        version: NotifyServer.version
    )

    @Option(name: .long, help: "The Unix socket path to listen on.")
    var socket: String?

    @Option(
        name: .long,
        help: "Octal permission bits for the socket file (default: 666 as root, so every user can connect; 600 otherwise).")
    var socketMode: String?

    @Option(name: .long, help: "Largest notification payload in bytes.")
    var maxPayload: UInt32 = ServerLimits.default.maxPayloadLength

    @Option(name: .long, help: "Most bytes queued for one client before its notifications are dropped and counted.")
    var outboundLimit: Int = 8 * 1024 * 1024

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

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
    }

    func run() async throws {
        let level = logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "notifyd")

        let uid = getuid()
        let environment = ProcessEnvironment.current
        let path = socket ?? SocketLocation.defaultPath(uid: uid, environment: environment)
        let mode = socketMode.flatMap { UInt32($0, radix: 8) } ?? (uid == 0 ? 0o666 : 0o600)

        var limits = ServerLimits.default
        limits.maxPayloadLength = maxPayload
        limits.maxFrameLength = max(limits.maxFrameLength, maxPayload + 1_024)
        let configuration = ServerConfiguration(
            listenAddress: .path(path), socketMode: mode, limits: limits, outboundByteLimit: outboundLimit)

        let notifier = ServiceManagerNotifier()
        let server = NotifyServer(configuration: configuration, logger: logger) { _ in
            _ = try? notifier.ready(status: "serving")
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: server)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        do {
            try await group.run()
        } catch let error as ServerError {
            logger.critical("\(error.description)")
            throw ExitCode(1)
        }
        _ = try? notifier.stopping()
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
