import ArgumentParser
import Foundation
import Logging
import NotifyBridge
import UnixSignals

/// `notifyd-bridge`: carries selected notification names between the local notifyd and NATS.
@main
struct BridgeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notifyd-bridge",
        abstract: "Bridge selected notifyd names over NATS.",
        discussion: """
            Local notifications matching an --export pattern are published to NATS as PREFIX.NAME with their \
            origin (host id, uid, gid, pid, sequence) in Notifyd-Origin-* headers; NATS messages under \
            PREFIX.PATTERN of an --import pattern are posted locally. A bridge never exports what it imported and \
            never imports what it exported, so `>` both ways on every host is safe. SIGUSR1 prints the counters \
            as one JSON line on standard output; SIGTERM and SIGINT stop the bridge (printing them once more).
            """)

    @Option(help: "The local daemon's socket (default: the library's default socket).")
    var socket: String?

    @Option(name: .customLong("nats"), help: "A NATS server URL, nats://[user:password@|token@]host[:port]; repeatable.")
    var natsURLs: [String] = []

    @Option(name: .customLong("export"), help: "Publish local notifications matching PATTERN to NATS; repeatable.")
    var exports: [String] = []

    @Option(name: .customLong("import"), help: "Post NATS messages whose name matches PATTERN locally; repeatable.")
    var imports: [String] = []

    @Option(help: "The subject prefix names are published under (default: notifyd).")
    var subjectPrefix: String?

    @Option(help: "This host's id in the origin headers (default: /etc/machine-id).")
    var hostID: String?

    @Option(help: "How many notifications the daemon may hold for the bridge per export pattern (default: 65536).")
    var queueLimit: UInt32?

    @Option(help: "Bytes of exports kept while NATS is unreachable before they are dropped (default: 8388608).")
    var maxPendingBytes: Int?

    @Option(help: "Mirror the exported and imported names' state values and retained notifications through this JetStream key-value bucket (created if missing).")
    var kvBucket: String?

    @Option(help: "Serve the counters in the Prometheus text format on this Unix socket (written on connect).")
    var metricsSocket: String?

    @Option(name: .customLong("config"), help: "A configuration file (directives as the options, one per line).")
    var configFile: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    func run() async throws {
        var configuration = BridgeConfiguration()
        if let configFile {
            let text: String
            do { text = try String(contentsOfFile: configFile, encoding: .utf8) } catch {
                throw ValidationError("cannot read \(configFile): \(error.localizedDescription)")
            }
            do { try configuration.apply(file: text) } catch { throw ValidationError("\(configFile): \(error)") }
        }
        if let socket { configuration.socketPath = socket }
        configuration.natsURLs += natsURLs
        configuration.exports += exports
        configuration.imports += imports
        if let subjectPrefix { configuration.subjectPrefix = subjectPrefix }
        if let hostID { configuration.hostID = hostID }
        if let queueLimit { configuration.queueLimit = queueLimit }
        if let maxPendingBytes { configuration.maxPendingBytes = maxPendingBytes }
        if let kvBucket { configuration.kvBucket = kvBucket }
        do { try configuration.validate() } catch { throw ValidationError("\(error)") }

        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("unknown log level '\(logLevel)'")
        }
        let host = try configuration.hostID ?? Self.machineID()
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "notifyd-bridge")
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint, .sigusr1)
        let bridge = try Bridge(configuration: configuration, hostID: host, logger: logger)
        try bridge.start()
        if let metricsSocket {
            do { try await bridge.serveMetrics(at: metricsSocket) } catch {
                throw ValidationError("cannot listen on \(metricsSocket): \(error)")
            }
        }
        logger.info(
            "bridging as host \(host): export \(configuration.exports), import \(configuration.imports), subjects under \(configuration.subjectPrefix).")
        let status = Task { await bridge.publishStatus(every: .seconds(1)) }
        let readiness = Task {
            do {
                try await bridge.waitUntilReady(timeout: 3600)
                logger.info("bridge ready: subscribed locally and on NATS")
            } catch {
                logger.warning("bridge not ready: \(error)")
            }
        }
        for await signal in signals {
            Self.printStatistics(bridge.statistics)
            if signal != .sigusr1 { break }
        }
        readiness.cancel()
        status.cancel()
        await bridge.close()
    }

    static func machineID() throws -> String {
        guard let text = try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8),
            case let id = text.trimmingCharacters(in: .whitespacesAndNewlines), !id.isEmpty
        else { throw ValidationError("cannot read /etc/machine-id: give --host-id") }
        return id
    }

    static func printStatistics(_ statistics: BridgeStatistics) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        if let data = try? encoder.encode(statistics) {
            FileHandle.standardOutput.write(data + Data("\n".utf8))
        }
    }
}
