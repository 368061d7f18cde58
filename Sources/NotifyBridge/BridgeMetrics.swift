#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Prometheus

/// The bridge's counters in the Prometheus text format (swift-prometheus), served on a Unix socket that writes the
/// exposition to each client that connects and closes, like the daemon's metrics socket.
final class BridgeMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let counters: [(Prometheus.Counter, BridgeCounter)]
    private let connected: Prometheus.Gauge
    /// What the counters were last moved to (swift-prometheus counters only go up by increments).
    private let exported = NIOLockedValueBox(BridgeStatistics())

    /// The series of each counter: a metric and, for the losses and refusals, its reason label.
    private static func series(of counter: BridgeCounter) -> (name: String, help: String, reason: String?)? {
        let dropped = "Messages lost, by reason."
        let refused = "Messages refused, by reason."
        switch counter {
        case .exported: return ("exported", "Local notifications published to NATS.", nil)
        case .imported: return ("imported", "NATS messages handed to the local daemon.", nil)
        case .exportDropped: return ("dropped", dropped, "outbox_full")
        case .exportLostInFlight: return ("dropped", dropped, "in_flight")
        case .exportDroppedByDaemon: return ("dropped", dropped, "daemon_queue")
        case .importLost: return ("dropped", dropped, "daemon_unreachable")
        case .importGaps: return ("gaps", "Messages missing between two from the same bridge.", nil)
        case .importRefused: return ("refused", refused, "daemon")
        case .importInvalidName: return ("refused", refused, "invalid_name")
        case .importTooLarge: return ("refused", refused, "import_too_large")
        case .exportTooLarge: return ("refused", refused, "export_too_large")
        case .importInvalidOrigin: return ("refused", refused, "invalid_origin")
        case .importHostIDClash: return ("refused", refused, "host_id_clash")
        case .natsReconnects: return ("nats_reconnects", "NATS connections after the first.", nil)
        case .stateExported: return ("state_exported", "State values put into the key-value bucket.", nil)
        case .stateImported: return ("state_imported", "State values from the key-value bucket set locally.", nil)
        case .retainedExported:
            return ("retained_exported", "Retained notifications put into the key-value bucket.", nil)
        case .retainedImported:
            return ("retained_imported", "Retained notifications from the key-value bucket posted locally.", nil)
        case .bucketPutFailed: return ("dropped", dropped, "bucket_put_failed")
        case .stateRefused: return ("refused", refused, "state_daemon")
        case .bucketInvalid: return ("refused", refused, "bucket_invalid")
        case .bucketWatchRestarts: return ("bucket_watch_restarts", "Times the key-value bucket's mirror started over: its watch failed, or its bucket was gone.", nil)
        case .bucketReplaced:
            return ("bucket_replaced", "Times the key-value bucket was found deleted and created again.", nil)
        case .bucketEntries:
            return ("bucket_entries", "Entries the key-value bucket's watch delivered, applied or not.", nil)
        case .importSkippedOwn: return nil
        }
    }

    init(host: String) {
        let registry = registry
        let labels = [("host", host)]
        counters = BridgeCounter.allCases.compactMap { counter in
            guard let series = Self.series(of: counter) else { return nil }
            let descriptor = MetricNameDescriptor(
                namespace: "notifyd_bridge", metricName: series.name, unitName: "total", helpText: series.help)
            let extra = series.reason.map { [("reason", $0)] } ?? []
            return (registry.makeCounter(descriptor: descriptor, labels: labels + extra), counter)
        }
        connected = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "notifyd_bridge", metricName: "nats_connected", unitName: "",
                helpText: "1 while connected to NATS."),
            labels: labels)
    }

    /// The exposition for `statistics`.
    func render(_ statistics: BridgeStatistics) -> [UInt8] {
        exported.withLockedValue { last in
            for (series, counter) in counters where statistics[counter] > last[counter] {
                series.increment(by: Int64(statistics[counter] - last[counter]))
            }
            last = statistics
        }
        connected.set(to: statistics.natsConnected ? 1.0 : 0.0)
        return registry.emitToBuffer()
    }

    /// Listens on `path` (replacing a stale socket there) until the returned channel is closed.
    static func serve(at path: String, bridge: Bridge, group: any EventLoopGroup) async throws -> any Channel {
        let metrics = BridgeMetrics(host: bridge.hostID)
        _ = unlink(path)
        return try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ScrapeHandler(body: { metrics.render(bridge.statistics) }))
                }
            }
            .bind(unixDomainSocketPath: path).get()
    }

    private final class ScrapeHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let body: () -> [UInt8]

        init(body: @escaping () -> [UInt8]) { self.body = body }

        func channelActive(context: ChannelHandlerContext) {
            let channel = context.channel
            channel.writeAndFlush(channel.allocator.buffer(bytes: body())).whenComplete { _ in
                channel.close(promise: nil)
            }
        }
    }
}
