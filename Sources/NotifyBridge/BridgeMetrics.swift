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
    private let counters: [(Prometheus.Counter, @Sendable (BridgeStatistics) -> UInt64)]
    private let connected: Prometheus.Gauge
    /// What the counters were last moved to (swift-prometheus counters only go up by increments).
    private let exported = NIOLockedValueBox(BridgeStatistics())

    init(host: String) {
        let registry = registry
        let labels = [("host", host)]
        func counter(
            _ name: String, _ help: String, extra: [(String, String)] = [],
            _ value: @escaping @Sendable (BridgeStatistics) -> UInt64
        ) -> (Prometheus.Counter, @Sendable (BridgeStatistics) -> UInt64) {
            let descriptor = MetricNameDescriptor(
                namespace: "notifyd_bridge", metricName: name, unitName: "total", helpText: help)
            return (registry.makeCounter(descriptor: descriptor, labels: labels + extra), value)
        }
        counters = [
            counter("exported", "Local notifications published to NATS.") { $0.exported },
            counter("imported", "NATS messages handed to the local daemon.") { $0.imported },
            counter("dropped", "Messages lost, by reason.", extra: [("reason", "outbox_full")]) { $0.exportDropped },
            counter("dropped", "Messages lost, by reason.", extra: [("reason", "in_flight")]) {
                $0.exportLostInFlight
            },
            counter("dropped", "Messages lost, by reason.", extra: [("reason", "daemon_queue")]) {
                $0.exportDroppedByDaemon
            },
            counter("dropped", "Messages lost, by reason.", extra: [("reason", "daemon_unreachable")]) {
                $0.importLost
            },
            counter("gaps", "Messages missing between two from the same bridge.") { $0.importGaps },
            counter("refused", "Messages refused, by reason.", extra: [("reason", "daemon")]) { $0.importRefused },
            counter("refused", "Messages refused, by reason.", extra: [("reason", "invalid_name")]) {
                $0.importInvalidName
            },
            counter("refused", "Messages refused, by reason.", extra: [("reason", "import_too_large")]) {
                $0.importTooLarge
            },
            counter("refused", "Messages refused, by reason.", extra: [("reason", "export_too_large")]) {
                $0.exportTooLarge
            },
            counter("nats_reconnects", "NATS connections after the first.") { $0.natsReconnects },
        ]
        connected = registry.makeGauge(
            descriptor: MetricNameDescriptor(
                namespace: "notifyd_bridge", metricName: "nats_connected", unitName: "",
                helpText: "1 while connected to NATS."),
            labels: labels)
    }

    /// The exposition for `statistics`.
    func render(_ statistics: BridgeStatistics) -> [UInt8] {
        exported.withLockedValue { last in
            for (counter, value) in counters where value(statistics) > value(last) {
                counter.increment(by: Int64(value(statistics) - value(last)))
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
