#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// The metrics socket: Prometheus text written on connection, counters that follow what clients did, and
/// per-user and per-connection series only for what the scraper may see, bounded in number.
@Suite("Metrics", .timeLimit(.minutes(TestScale.minutes(1))))
struct MetricsTests {
    /// Scrapes the metrics socket at `path` as `identity`: everything until the daemon closes.
    static func scrape(_ path: String, as identity: PeerIdentity = .root) async throws -> String {
        let descriptor =
            identity == .root
            ? try UnixSocketAddress.connectedDescriptor(path) : try await CredentialSwitch.connect(to: path, as: identity)
        defer { close(descriptor) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count == 0 { break }
            guard count > 0 else { throw TestFailure("scrape of \(path): no end within 10 s (errno \(errno))") }
            bytes += buffer.prefix(count)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The value of the series `series` (name and labels as written), if present.
    static func value(_ series: String, in text: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }

    /// Every line is a comment or `name{labels} value`, as the text format wants.
    static func checkFormat(_ text: String) {
        let sample = #/^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? [-+0-9.eEInfa]+$/#
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            #expect(line.wholeMatch(of: sample) != nil, "not a sample line: \(line)")
        }
    }

    @Test("counters and gauges follow what the clients did; the text is well formed")
    func countersFollow() async throws {
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        #expect(chmod(directory, 0o755) == 0)
        let metricsPath = directory + "/metrics.sock"
        try await withServer(everyUser: true, { $0.metricsAddress = .path(metricsPath) }) { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("org.example.metrics", id: 1)
            let poster = try await server.connect("poster")
            for _ in 0..<25 { try await poster.post("org.example.metrics", "x") }
            _ = try await poster.subscribeRefused("bad name", id: 9)
            let text = try await Self.scrape(metricsPath)
            Self.checkFormat(text)
            #expect(Self.value("notifyd_posts_total", in: text) == 25)
            #expect(Self.value("notifyd_deliveries_total", in: text) == 25)
            #expect(Self.value("notifyd_connections", in: text) == 2)
            #expect(Self.value("notifyd_subscriptions", in: text) == 1)
            #expect(text.contains("# TYPE notifyd_holding_duration_seconds histogram"))

            let broken = try await server.connectRaw("broken")
            try await broken.sendRaw([0, 0, 0, 1, 0x7F])  // an unknown message type: fatal
            _ = try await broken.framesUntilEnd()
            try await server.waitForStatus("the broken connection gone") { $0.connections == 2 }
            let again = try await Self.scrape(metricsPath)
            #expect(Self.value("notifyd_posts_total", in: again) == 25, "counters move by what happened, once")
            #expect(Self.value("notifyd_protocol_errors_total", in: again) == 1)
            #expect(Self.value("notifyd_connections_opened_total", in: again) == 3)
            #expect(Self.value("notifyd_connections_closed_total", in: again) == 1)
        }
    }

    @Test("the connections furthest behind: root sees every user's, a user only its own; at most ten")
    func lagSeriesAreScopedAndBounded() async throws {
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        #expect(chmod(directory, 0o755) == 0)
        let metricsPath = directory + "/metrics.sock"
        try await withServer(everyUser: true, { $0.metricsAddress = .path(metricsPath) }) { server in
            var stalled: [TestClient] = []
            for index in 0..<12 {
                let identity: PeerIdentity = index == 0 ? .alice : .bob
                let client = try await server.connect("stalled-\(index)", as: identity, receiveBufferSize: 4_096)
                try await client.subscribe("org.example.flood", id: 1, policy: .queue(limit: 100_000))
                try await client.setReading(false)
                stalled.append(client)
            }
            let poster = try await server.connect("poster")
            let payload = ByteBuffer(string: String(repeating: "x", count: 1_000))
            for _ in 0..<600 { try await poster.postUnacknowledged("org.example.flood", payload) }
            _ = try await poster.barrier()
            try await server.waitForStatus("bytes owed to the stalled clients") { $0.outboundBytes + $0.heldBytes > 600_000 }

            let asRoot = try await Self.scrape(metricsPath)
            Self.checkFormat(asRoot)
            let rootSeries = asRoot.split(separator: "\n").filter { $0.hasPrefix("notifyd_client_lag_bytes{") }
            #expect(rootSeries.count == DaemonMetrics.topN, "bounded: 12 clients behind, \(DaemonMetrics.topN) shown")
            #expect(asRoot.contains("notifyd_user_charge{uid=\"4202\""))

            let asAlice = try await Self.scrape(metricsPath, as: .alice)
            Self.checkFormat(asAlice)
            let aliceSeries = asAlice.split(separator: "\n").filter { $0.hasPrefix("notifyd_client_lag_bytes{") }
            #expect(aliceSeries.count == 1, "alice sees her own connection only: \(aliceSeries)")
            #expect(aliceSeries.allSatisfy { $0.contains("uid=\"4201\"") })
            #expect(!asAlice.contains("uid=\"4202\""), "nothing of bob's")
            #expect(Self.value("notifyd_posts_total", in: asAlice) == 600, "the daemon-wide counters are everyone's")
            for client in stalled { try await client.setReading(true) }
        }
    }
}
