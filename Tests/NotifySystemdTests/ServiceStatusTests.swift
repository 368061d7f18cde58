import NotifySystemd
import Testing

@Suite("Service status line")
struct ServiceStatusTests {
    @Test("format", arguments: [
        (0, 0, 0.0, "0 connections, 0 subscriptions, 0 notifications/s"),
        (1, 1, 1.0, "1 connection, 1 subscription, 1 notifications/s"),
        (3, 12, 41.54, "3 connections, 12 subscriptions, 41.5 notifications/s"),
        (2, 5, 0.04, "2 connections, 5 subscriptions, 0 notifications/s"),
        (2, 5, 0.05, "2 connections, 5 subscriptions, 0.1 notifications/s"),
        (7, 9, 99.96, "7 connections, 9 subscriptions, 100 notifications/s"),
        (7, 9, 12_345.6, "7 connections, 9 subscriptions, 12346 notifications/s"),
    ])
    func format(connections: Int, subscriptions: Int, rate: Double, expected: String) {
        let status = ServiceStatus(connections: connections, subscriptions: subscriptions, notificationsPerSecond: rate)
        #expect(status.description == expected)
        #expect(!status.description.contains("\n"))
    }

    @Test("rate from two counter readings")
    func rate() {
        #expect(ServiceStatus.rate(from: 100, to: 150, elapsedSeconds: 5) == 10)
        #expect(ServiceStatus.rate(from: 100, to: 100, elapsedSeconds: 5) == 0)
        #expect(ServiceStatus.rate(from: 100, to: 50, elapsedSeconds: 5) == 0)
        #expect(ServiceStatus.rate(from: 0, to: 50, elapsedSeconds: 0) == 0)
    }
}
