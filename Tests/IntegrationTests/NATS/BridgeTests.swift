import Foundation
import NIOCore
import Notify
import NotifyNATS
import NotifyTestSupport
import Testing

/// `notifyd-bridge` as a real process between a real notifyd and a real nats-server.
@Suite("notifyd-bridge", .serialized)
struct BridgeTests {
    static let nobody: (uid: UInt32, gid: UInt32) = (65_534, 65_534)

    private func statistics(of bridge: ChildProcess) async throws -> [String: Int] {
        try await bridge.bridgeStatistics()
    }

    private func waitForCounter(
        _ key: String, atLeast value: Int, of bridge: ChildProcess
    ) async throws -> [String: Int] {
        try await poll("the bridge's \(key) to reach \(value)", timeout: 20) {
            let now = try await statistics(of: bridge)
            return (now[key] ?? 0) >= value ? now : nil
        }
    }

    @Test("imports and exports with origin headers; refusals and limits both ways are counted; NATS down leaves local delivery alone")
    func carriesAndCounts() async throws {
        try await withIntegrationScope { scope in
            // Payload limits crossed on purpose: NATS takes 1,050 bytes (headers included), notifyd 1,000.
            let natsConfig = scope.directory + "/nats.conf"
            try "max_payload: 1050\n".write(toFile: natsConfig, atomically: true, encoding: .utf8)
            let server = try await NATSServerProcess.start(in: scope, arguments: ["-c", natsConfig])
            let notifydConfig = scope.directory + "/notifyd.conf"
            try "reserve org.reserved.> owner=root post=owner observe=all\n"
                .write(toFile: notifydConfig, atomically: true, encoding: .utf8)
            _ = try await scope.startOpenDaemon(
                ["--socket-mode", "666", "--config", notifydConfig, "--max-payload", "1000"])
            // An unprivileged bridge, as its unit runs it: the daemon's access rules apply to what it imports. Its
            // metrics socket goes in a directory it may write to.
            let bridgeDirectory = scope.directory + "/bridge"
            guard mkdir(bridgeDirectory, 0o700) == 0, chown(bridgeDirectory, Self.nobody.uid, Self.nobody.gid) == 0 else {
                throw TestFailure("cannot make \(bridgeDirectory) for uid \(Self.nobody.uid)")
            }
            let metricsSocket = bridgeDirectory + "/metrics.sock"
            let bridge = try scope.launchAs(
                uid: Self.nobody.uid, gid: Self.nobody.gid, .bridge,
                // Overlapping patterns both ways: each notification and message still crosses once.
                ["--socket", scope.socketPath, "--nats", server.url, "--export", "org.example.>", "--export", "org.>",
                 "--import", ">", "--import", "org.example.>",
                 "--host-id", "test-host", "--max-pending-bytes", "5000", "--log-level", "debug",
                 "--metrics-socket", metricsSocket])
            defer { bridge.send(SIGKILL) }
            try await bridge.waitForLine(containing: "bridge ready")

            let center = try await NotifyCenter.connect(configuration: .init(socketPath: scope.socketPath))
            let local = Locked<[ReceivedNotification]>([])
            let observation = try center.observe("org.example.>", on: .immediate) { note in local.withLock { $0.append(note) } }
            try await center.synchronize()
            let nats = try await NATSClient.connected(to: [server.url])
            let remote = ReceivedMessages()
            _ = try nats.subscribe("notifyd.>", handler: remote.handler)
            try await nats.flush()

            // In: one good message, then one of each refusal, then a marker.
            let farOrigin = NATSHeaders([
                ("Notifyd-Origin-Host", "far-host"), ("Notifyd-Origin-UID", "1234"), ("Notifyd-Origin-GID", "55"),
                ("Notifyd-Origin-PID", "99"), ("Notifyd-Origin-Seq", "5"), ("Notifyd-Bridge-Seq", "1"),
            ])
            try nats.publish("notifyd.org.example.in", payload: ByteBuffer(string: "remote"), headers: farOrigin)
            try nats.publish("notifyd.org.reserved.x", payload: ByteBuffer(string: "forbidden"))
            try nats.publish("notifyd.org/example", payload: ByteBuffer(string: "not a name"))
            try nats.publish("notifyd.org.example.big", payload: ByteBuffer(repeating: 1, count: 1_040))
            // An origin host the daemon would refuse (over 255 bytes): refused by the bridge, which stays connected.
            try nats.publish(
                "notifyd.org.example.longhost", payload: ByteBuffer(),
                headers: NATSHeaders([("Notifyd-Origin-Host", String(repeating: "h", count: 300))]))
            try nats.publish("notifyd.org.example.marker", payload: ByteBuffer())
            _ = try await poll("the imports to arrive locally", timeout: 20) {
                local.withLock { $0.contains { $0.name == "org.example.marker" } } ? true : nil
            }
            #expect(local.withLock { $0.map(\.name) } == ["org.example.in", "org.example.marker"])
            #expect(local.withLock { $0.first?.payloadString } == "remote")
            #expect(local.withLock { $0.first?.sender.uid } == Self.nobody.uid, "posted by the bridge")
            #expect(
                local.withLock { $0.first?.origin }
                    == NotificationOrigin(host: "far-host", uid: 1_234, gid: 55, pid: 99, sequence: 5),
                "marked as remote, with the origin its headers gave")
            #expect(
                local.withLock { $0.last?.origin?.host } == "nats",
                "a message from a plain NATS client is remote too")
            var counters = try await waitForCounter("import_refused", atLeast: 1, of: bridge)
            #expect(counters["imported"] == 3, "handed to the daemon, which refused one")
            #expect(counters["import_refused"] == 1)
            #expect(counters["import_invalid_name"] == 1)
            #expect(counters["import_too_large"] == 1)
            #expect(counters["import_invalid_origin"] == 1)

            // Out: origin in the headers; too large for NATS once the headers are added; not re-exported imports.
            try center.post("org.example.out", text: "local")
            try center.post("org.example.toolarge", payload: [UInt8](repeating: 2, count: 1_000))
            try center.post("org.example.out2", text: "after", retain: true)
            let fromBridge = { remote.all.filter { $0.headers?["Notifyd-Origin-Host"] == "test-host" } }
            _ = try await poll("two exports", timeout: 20) { fromBridge().count >= 2 ? true : nil }
            let messages = fromBridge()
            #expect(messages.map(\.subject) == ["notifyd.org.example.out", "notifyd.org.example.out2"])
            let headers = messages[0].headers
            #expect(headers?["Notifyd-Origin-Host"] == "test-host")
            #expect(headers?["Notifyd-Origin-UID"] == String(getuid()))
            #expect(headers?["Notifyd-Origin-PID"] == String(getpid()))
            #expect(messages.map { $0.headers?["Notifyd-Bridge-Seq"] } == ["1", "2"], "numbered once NATS took them")
            #expect(
                messages.map { $0.headers?["Notifyd-Retained"] } == [nil, nil],
                "without a bucket the bridge does not ask which posts were retained (marked posts are never held)")
            counters = try await statistics(of: bridge)
            #expect(counters["exported"] == 2)
            #expect(counters["export_too_large"] == 1)

            // The bridge reports itself to local programs: notifyctl status shows its counters.
            _ = try await poll("notifyctl status to show the bridge's exports", timeout: 20) { () async throws -> Bool? in
                let run = try await scope.run(.notifyctl, ["status", "--json", "--socket", scope.socketPath])
                guard let line = run.stdoutLines.first,
                    let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let bridges = object["bridges"] as? [[String: Any]], bridges.count == 1
                else { return nil }
                let bridge = bridges[0]
                guard (bridge["exported"] as? Int) == 2 else { return nil }
                #expect(bridge["host"] as? String == "test-host")
                #expect(bridge["import_refused"] as? Int == 1)
                #expect(bridge["posted_by_uid"] as? Int == Int(Self.nobody.uid))
                return true
            }
            // And to a Prometheus scraper, on its metrics socket.
            let exposition = try Self.readAll(metricsSocket)
            #expect(exposition.contains("notifyd_bridge_exported_total{host=\"test-host\"} 2"), "\(exposition)")
            #expect(exposition.contains("notifyd_bridge_refused_total{host=\"test-host\",reason=\"daemon\"} 1"), "\(exposition)")
            #expect(exposition.contains("notifyd_bridge_nats_connected{host=\"test-host\"} 1"), "\(exposition)")
            let human = try await scope.run(.notifyctl, ["status", "--socket", scope.socketPath])
            #expect(human.stdoutText.contains("test-host: NATS connected, exported 2, imported 3"), "\(human.diagnostics)")

            // NATS gone: local posts still reach local observers at once; exports wait, then are dropped and counted.
            try await server.kill()
            _ = try await poll("the bridge to see NATS gone", timeout: 20) {
                try await statistics(of: bridge)["nats_connected"] == 0 ? true : nil
            }
            let before = local.withLock { $0.count }
            for index in 0..<200 { try center.post("org.example.during", text: "\(index)") }
            _ = try await poll("200 local deliveries with NATS down", timeout: 20) {
                local.withLock { $0.count } >= before + 200 ? true : nil
            }
            // Every export is accounted for once the bridge has seen them all: sent before NATS went, or dropped.
            counters = try await poll("the bridge to account for 202 exports", timeout: 20) {
                let now = try await statistics(of: bridge)
                return (now["exported"] ?? 0) + (now["export_dropped"] ?? 0) >= 202 ? now : nil
            }
            #expect(counters["exported"]! + counters["export_dropped"]! == 202, "\(counters)")
            #expect(counters["export_dropped"]! > 0, "a 5,000-byte outbox cannot hold 200 exports")
            observation.cancel()
            await nats.close()
            await center.close()
        }
    }

    @Test("bad command lines and configuration files fail with a message naming the problem")
    func badInvocations() async throws {
        try await withIntegrationScope { scope in
            let cases: [([String], String)] = [
                (["--export", ">"], "missing at least one --nats URL"),
                (["--nats", "nats://127.0.0.1:1"], "missing at least one --export or --import pattern"),
                (["--nats", "tls://h", "--export", ">"], "invalid NATS URL 'tls://h'"),
                (["--nats", "h", "--export", "a..b"], "invalid pattern 'a..b'"),
                (["--nats", "h", "--import", "self.>"], "self. names never leave their process"),
                (["--nats", "h", "--export", ">", "--subject-prefix", "a.*"], "invalid subject prefix 'a.*'"),
                (["--nats", "h", "--export", ">", "--kv-bucket", "a*b"], "invalid kv-bucket 'a*b'"),
                (["--config", scope.directory + "/missing.conf"], "cannot read \(scope.directory)/missing.conf"),
            ]
            for (arguments, message) in cases {
                let run = try await scope.run(.bridge, arguments)
                #expect(run.termination != .exited(0), "\(arguments) should fail")
                #expect(run.stderrText.contains(message), "\(arguments): \(run.diagnostics)")
            }
            let file = scope.directory + "/bridge.conf"
            try "nats nats://127.0.0.1:1\nexport >\nfrobnicate yes\n".write(toFile: file, atomically: true, encoding: .utf8)
            let run = try await scope.run(.bridge, ["--config", file])
            #expect(run.termination != .exited(0))
            #expect(run.stderrText.contains("configuration line 3: unknown directive 'frobnicate'"), "\(run.diagnostics)")
        }
    }

    /// Everything a Unix socket at `path` writes before it closes.
    static func readAll(_ path: String) throws -> String {
        let descriptor = try UnixSocketAddress.connectedDescriptor(path)
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension ChildProcess {
    /// A `notifyd-bridge`'s counters: SIGUSR1 prints them as a JSON line on its standard output.
    func bridgeStatistics() async throws -> [String: Int] {
        let before = stdoutLines.count
        send(SIGUSR1)
        let lines = try await waitForStdoutLines(before + 1)
        let object = try JSONSerialization.jsonObject(with: Data(lines[before].utf8)) as? [String: Any] ?? [:]
        return object.compactMapValues { ($0 as? NSNumber)?.intValue }
    }
}
