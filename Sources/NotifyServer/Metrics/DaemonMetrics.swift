import CoreMetrics
import NIOCore
import NotifyWire
import Prometheus

/// The daemon's metrics, through swift-metrics, exported in the Prometheus text format by swift-prometheus.
///
/// Nothing is counted on the hot path: the broker already counts everything in plain integers on its event loop
/// (``ServerStatistics``); a scrape, on that loop, moves the counters forward by what happened since the last one
/// and sets the gauges. Labels that name users or connections are rendered per scrape, for what the scraper may
/// see, and bounded (the top ``topN`` by backlog), so that neither a thousand clients nor an unprivileged
/// scraper can make a scrape large or revealing.
final class DaemonMetrics {
    /// The most users and the most connections given labels of their own in one scrape.
    static let topN = 10

    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private var exported = ServerStatistics()
    private let counters: [(counter: CoreMetrics.Counter, value: (ServerStatistics) -> UInt64)]
    private let gauges: [String: CoreMetrics.Gauge]
    /// How long each episode of holding notifications for a slow or suspended client lasted, from the first
    /// notification held to the last one released.
    let holdingDuration: CoreMetrics.Timer

    init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["notifyd_holding_duration_seconds"] = [
            .milliseconds(1), .milliseconds(10), .milliseconds(100), .seconds(1), .seconds(10), .seconds(60),
            .seconds(600),
        ]
        self.factory = factory
        func counter(_ name: String, _ labels: [(String, String)] = [], _ value: @escaping (ServerStatistics) -> UInt64)
            -> (CoreMetrics.Counter, (ServerStatistics) -> UInt64)
        {
            (CoreMetrics.Counter(label: name, dimensions: labels, factory: factory), value)
        }
        counters = [
            counter("notifyd_posts_total") { $0.posts },
            counter("notifyd_deliveries_total") { $0.deliveries },
            counter("notifyd_merged_total", [("policy", "coalesce")]) { $0.merged },
            counter("notifyd_dropped_total", [("reason", "queue_limit_or_bound")]) { $0.dropped },
            counter("notifyd_connections_opened_total") { $0.connectionsAccepted },
            counter("notifyd_connections_closed_total") { $0.connectionsClosed },
            counter("notifyd_slow_consumer_disconnects_total") { $0.slowConsumerDisconnects },
            counter("notifyd_permission_denials_total") { $0.permissionDenials },
            counter("notifyd_quota_refusals_total") { $0.quotaRefusals },
            counter("notifyd_protocol_errors_total") { $0.protocolErrors },
            counter("notifyd_accept_failures_total") { $0.acceptFailures },
            counter("notifyd_connections_refused_total") { $0.connectionsRefused },
        ]
        var gauges: [String: CoreMetrics.Gauge] = [:]
        for name in [
            "notifyd_connections", "notifyd_subscriptions", "notifyd_subscribed_names", "notifyd_patterns",
            "notifyd_state_names", "notifyd_retained_names", "notifyd_outbound_bytes", "notifyd_held_bytes",
            "notifyd_resident_memory_bytes",
        ] {
            gauges[name] = CoreMetrics.Gauge(label: name, factory: factory)
        }
        self.gauges = gauges
        holdingDuration = CoreMetrics.Timer(label: "notifyd_holding_duration_seconds", factory: factory)
    }

    /// The exposition for one scrape by `scraper` (`nil`: unknown, such as an HTTP scraper: no per-user or
    /// per-connection series). Runs on the broker's event loop.
    func scrape(_ broker: Broker, scraper uid: UInt32?) -> [UInt8] {
        let statistics = broker.statistics
        for (counter, value) in counters {
            let delta = value(statistics) &- value(exported)
            if delta > 0 { counter.increment(by: Int64(clamping: delta)) }
        }
        exported = statistics
        let status = broker.status()
        let values: [String: Double] = [
            "notifyd_connections": Double(status.connections), "notifyd_subscriptions": Double(status.subscriptions),
            "notifyd_subscribed_names": Double(status.subscribedNames), "notifyd_patterns": Double(status.patterns),
            "notifyd_state_names": Double(status.stateNames), "notifyd_retained_names": Double(status.retainedNames),
            "notifyd_outbound_bytes": Double(status.outboundBytes), "notifyd_held_bytes": Double(status.heldBytes),
            "notifyd_resident_memory_bytes": Double(status.residentMemoryBytes),
        ]
        for (name, value) in values { gauges[name]?.record(value) }
        var bytes = registry.emitToBuffer()
        if let uid { bytes += visibleSeries(broker, scraper: uid) }
        return bytes
    }

    /// Per-user charges against their quotas, and the connections furthest behind: root sees everyone's, another
    /// user only its own (the rule of `QUERY clients`). A registry of their own, made for this scrape.
    private func visibleSeries(_ broker: Broker, scraper uid: UInt32) -> [UInt8] {
        let registry = PrometheusCollectorRegistry()
        func gauge(_ metric: String, _ unit: String, _ labels: [(String, String)], _ help: String) -> Prometheus.Gauge {
            registry.makeGauge(
                descriptor: MetricNameDescriptor(namespace: "notifyd", metricName: metric, unitName: unit, helpText: help),
                labels: labels)
        }
        let quotas = broker.accounts.quotas
        let users = broker.accounts.all
            .filter { uid == 0 || $0.uid == uid }
            .sorted { ($0.outboundBytes, $0.subscriptions, $0.uid) > ($1.outboundBytes, $1.subscriptions, $1.uid) }
            .prefix(Self.topN)
        for account in users {
            let user = ("uid", "\(account.uid)")
            for (resource, used, quota) in [
                ("connections", account.connections, quotas.connectionsPerUID),
                ("subscriptions", account.subscriptions, quotas.subscriptionsPerUID),
                ("pattern_labels", account.patternLabels, quotas.patternLabelsPerUID),
                ("outbound_bytes", account.outboundBytes, quotas.outboundBytesPerUID),
                ("retained_bytes", account.retainedBytes, quotas.retainedBytesPerUID),
                ("state_names", account.stateNames, quotas.stateNamesPerUID),
            ] {
                gauge("user_charge", "", [user, ("resource", resource)], "What a user holds of a resource its quota bounds.").set(Double(used))
                gauge("user_quota", "", [user, ("resource", resource)], "The per-user quota of a resource.").set(Double(quota))
            }
        }
        let behind = broker.clients(visibleTo: uid)
            .filter { ($0.lagBytes ?? 0) > 0 }
            .sorted { ($0.lagBytes ?? 0, $0.connection) > ($1.lagBytes ?? 0, $1.connection) }
            .prefix(Self.topN)
        for client in behind {
            let labels = [
                ("connection", "\(client.connection)"), ("uid", "\(client.uid)"),
                ("client", String(client.clientName.prefix(64))),
            ]
            gauge("client_lag", "bytes", labels, "Bytes owed to a connection, queued and held: the furthest behind.")
                .set(Double(client.lagBytes ?? 0))
            gauge("client_lag_notifications", "", labels, "Notifications held for a connection, not yet queued.")
                .set(Double(client.lagNotifications ?? 0))
            gauge("client_lag_oldest", "seconds", labels, "How long the oldest byte owed to a connection has waited.")
                .set(client.lagOldestSeconds ?? 0)
            gauge("client_dropped", "", labels, "Notifications dropped for a connection so far.").set(Double(client.dropped))
            gauge("client_merged", "", labels, "Notifications merged for a connection so far.").set(Double(client.merged))
        }
        return registry.emitToBuffer()
    }
}
