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
    private var exported = ServerStatistics()
    private let counters: [(counter: Prometheus.Counter, value: (ServerStatistics) -> UInt64)]
    private let gauges: [String: Prometheus.Gauge]
    /// How long each episode of holding notifications for a slow or suspended client lasted, from the first
    /// notification held to the last one released.
    let holdingDuration: DurationHistogram

    // Made through swift-prometheus's registry with a description each: its swift-metrics factory writes no
    // HELP lines, which `promtool check metrics` reports for every metric.
    init() {
        let registry = registry
        func descriptor(_ metric: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(namespace: "notifyd", metricName: metric, unitName: unit, helpText: help)
        }
        func counter(
            _ metric: String, _ help: String, labels: [(String, String)] = [],
            _ value: @escaping (ServerStatistics) -> UInt64
        ) -> (Prometheus.Counter, (ServerStatistics) -> UInt64) {
            (registry.makeCounter(descriptor: descriptor(metric, "total", help), labels: labels), value)
        }
        counters = [
            counter("posts", "Posts accepted.") { $0.posts },
            counter("deliveries", "Notifications queued or held for connections.") { $0.deliveries },
            counter("merged", "Notifications merged into later ones.", labels: [("policy", "coalesce")]) { $0.merged },
            counter("dropped", "Notifications dropped or evicted.", labels: [("reason", "queue_limit_or_bound")]) { $0.dropped },
            counter("connections_opened", "Connections accepted.") { $0.connectionsAccepted },
            counter("connections_closed", "Connections closed, for any reason.") { $0.connectionsClosed },
            counter("slow_consumer_disconnects", "Connections closed under the disconnect policy.") {
                $0.slowConsumerDisconnects
            },
            counter("permission_denials", "Requests refused with permission-denied.") { $0.permissionDenials },
            counter("quota_refusals", "Requests and connections refused with quota-exceeded.") { $0.quotaRefusals },
            counter("protocol_errors", "Connections closed for a protocol error.") { $0.protocolErrors },
            counter("accept_failures", "accept() calls that failed for want of a descriptor.") { $0.acceptFailures },
            counter("connections_refused", "Clients answered ERROR unavailable for want of a descriptor.") {
                $0.connectionsRefused
            },
        ]
        var gauges: [String: Prometheus.Gauge] = [:]
        for (metric, unit, help) in [
            ("connections", "", "Open connections."), ("subscriptions", "", "Subscriptions of all connections."),
            ("subscribed_names", "", "Names with an exact subscriber."), ("patterns", "", "Pattern subscriptions."),
            ("state_names", "", "Names with a state value."), ("retained_names", "", "Names with a retained notification."),
            ("outbound", "bytes", "Bytes queued for connections and not yet written."),
            ("held", "bytes", "Bytes of the notifications held for slow or suspended connections."),
            ("resident_memory", "bytes", "The daemon's resident set size."),
        ] {
            let made = descriptor(metric, unit, help)
            gauges[made.name] = registry.makeGauge(descriptor: made, labels: [])
        }
        self.gauges = gauges
        holdingDuration = registry.makeDurationHistogram(
            descriptor: descriptor(
                "holding_duration", "seconds",
                "How long each spell of holding notifications for a slow or suspended connection lasted."),
            labels: [],
            buckets: [.milliseconds(1), .milliseconds(10), .milliseconds(100), .seconds(1), .seconds(10), .seconds(60), .seconds(600)])
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
        for (name, value) in values { gauges[name]?.set(value) }
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
        // The few furthest behind, found without describing every connection (a scrape of 20,000 connections
        // would otherwise build 20,000 descriptions on the event loop).
        var furthest: [(bytes: Int, number: UInt64, peer: Peer)] = []
        for peer in broker.peers.values where uid == 0 || peer.credentials.uid == uid {
            let bytes = peer.queue.pendingBytes + peer.queue.heldBytes
            guard bytes > 0, furthest.count < Self.topN || (bytes, peer.number) > (furthest.last!.bytes, furthest.last!.number)
            else { continue }
            furthest.append((bytes, peer.number, peer))
            furthest.sort { ($0.bytes, $0.number) > ($1.bytes, $1.number) }
            if furthest.count > Self.topN { furthest.removeLast() }
        }
        let now = NIODeadline.now()
        for client in furthest.map({ $0.peer.introspection(now: now) }) {
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
