/// The one-line summary a daemon reports to the service manager (`STATUS=`, shown by `systemctl status`):
/// `3 connections, 12 subscriptions, 41.5 notifications/s`.
package struct ServiceStatus: Sendable, Hashable, CustomStringConvertible {
    /// Open client connections.
    package var connections: Int
    /// Subscriptions held by all connections.
    package var subscriptions: Int
    /// Accepted posts per second over the last interval.
    package var notificationsPerSecond: Double

    /// Creates a status.
    package init(connections: Int, subscriptions: Int, notificationsPerSecond: Double) {
        self.connections = connections
        self.subscriptions = subscriptions
        self.notificationsPerSecond = notificationsPerSecond
    }

    /// Posts per second between two readings of a post counter `elapsedSeconds` apart (0 when no time passed or
    /// the counter went backwards, as after a restart).
    package static func rate(from previous: UInt64, to current: UInt64, elapsedSeconds: Double) -> Double {
        guard elapsedSeconds > 0, current >= previous else { return 0 }
        return Double(current - previous) / elapsedSeconds
    }

    /// The status line. Rates below 100 have one decimal; larger ones are whole numbers.
    package var description: String {
        "\(connections) \(connections == 1 ? "connection" : "connections"), "
            + "\(subscriptions) \(subscriptions == 1 ? "subscription" : "subscriptions"), "
            + "\(Self.formatRate(notificationsPerSecond)) notifications/s"
    }

    static func formatRate(_ rate: Double) -> String {
        guard rate.isFinite, rate > 0 else { return "0" }
        if rate >= 100 { return "\(Int(rate.rounded()))" }
        let tenths = Int((rate * 10).rounded())
        return tenths % 10 == 0 ? "\(tenths / 10)" : "\(tenths / 10).\(tenths % 10)"
    }
}
