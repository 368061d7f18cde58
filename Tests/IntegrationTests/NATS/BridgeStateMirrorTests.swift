import Foundation
import NIOCore
import Notify
import NotifyNATS
import NotifyTestSupport
import Testing

/// State values mirrored through a JetStream key-value bucket by real bridges between real daemons.
@Suite("notifyd-bridge: state values through a key-value bucket", .serialized)
struct BridgeStateMirrorTests {
    static let nobody: (uid: UInt32, gid: UInt32) = (65_534, 65_534)

    private func statistics(of bridge: ChildProcess) async throws -> [String: Int] {
        let before = bridge.stdoutLines.count
        bridge.send(SIGUSR1)
        let lines = try await bridge.waitForStdoutLines(before + 1)
        let object = try JSONSerialization.jsonObject(with: Data(lines[before].utf8)) as? [String: Any] ?? [:]
        return object.compactMapValues { ($0 as? NSNumber)?.intValue }
    }

    private func waitForState(_ name: String, _ value: UInt64, on center: NotifyCenter, _ host: String) async throws {
        _ = try await poll("\(name) = \(value) on \(host)", timeout: 20) {
            try await center.state(of: name) == value ? true : nil
        }
    }

    @Test("values cross hosts both ways; a host that starts later gets the current ones; refusals and bad entries are counted; nothing loops")
    func mirrorsStates() async throws {
        try await withIntegrationScope { scope in
            let store = scope.directory + "/jetstream"
            let server = try await NATSServerProcess.start(in: scope, arguments: ["-js", "-sd", store])

            // Host a: a root bridge; a value set before it starts.
            let socketA = scope.directory + "/a.sock"
            _ = try await scope.startDaemon(socketPath: socketA)
            let centerA = try await NotifyCenter.connect(configuration: .init(socketPath: socketA))
            try await centerA.setState(7, for: "org.example.config")
            let bridgeA = try scope.launch(
                .bridge,
                ["--socket", socketA, "--nats", server.url, "--export", "org.>", "--import", "org.>",
                 "--kv-bucket", "fleet", "--host-id", "host-a", "--log-level", "debug"])
            defer { bridgeA.send(SIGKILL) }
            try await bridgeA.waitForLine(containing: "mirroring state values")

            let nats = try await NATSClient.connected(to: [server.url])
            let kv = try await nats.keyValue(bucket: "fleet", createIfMissing: false)
            _ = try await poll("host a's current value in the bucket", timeout: 20) {
                try await kv.get("state.org.example.config").map { String(buffer: $0.value) } == "7"
                    ? true : nil
            }

            // Host b starts later, as an unprivileged bridge under the daemon's access rules.
            let config = scope.directory + "/notifyd.conf"
            try "reserve org.reserved.> owner=root post=owner observe=all\n"
                .write(toFile: config, atomically: true, encoding: .utf8)
            _ = try await scope.startOpenDaemon(["--socket-mode", "666", "--config", config])
            let centerB = try await NotifyCenter.connect(configuration: .init(socketPath: scope.socketPath))
            let seenOnB = Locked<[StateChange]>([])
            let watchB = try centerB.observeStates("org.>", sendingCurrent: false, on: .immediate) { change in
                seenOnB.withLock { $0.append(change) }
            }
            defer { watchB.cancel() }
            try await centerB.synchronize()
            let bridgeB = try scope.launchAs(
                uid: Self.nobody.uid, gid: Self.nobody.gid, .bridge,
                ["--socket", scope.socketPath, "--nats", server.url, "--export", "org.>", "--import", "org.>",
                 "--kv-bucket", "fleet", "--host-id", "host-b", "--log-level", "debug"])
            defer { bridgeB.send(SIGKILL) }
            try await waitForState("org.example.config", 7, on: centerB, "host b (started later)")
            #expect(seenOnB.withLock { $0.map(\.name) } == ["org.example.config"], "local observers see the import")
            #expect(seenOnB.withLock { $0.first?.sender?.uid } == Self.nobody.uid, "set by the bridge")

            // Live, both ways.
            try await centerB.setState(9, for: "org.example.other")
            try await waitForState("org.example.other", 9, on: centerA, "host a")
            try await centerA.setState(8, for: "org.example.config")
            try await waitForState("org.example.config", 8, on: centerB, "host b")

            // From another NATS client: a reserved name (host b's daemon refuses its unprivileged bridge; host a's
            // root bridge may), and a value no bridge can read.
            _ = try await kv.put("state.org.reserved.x", value: Array("5".utf8))
            _ = try await kv.put("state.org.example.bad", value: Array("not a number".utf8))
            try await waitForState("org.reserved.x", 5, on: centerA, "host a")
            _ = try await poll("host b to count the refusal", timeout: 20) {
                let counters = try await statistics(of: bridgeB)
                return (counters["state_refused"] ?? 0) >= 1 && (counters["state_invalid"] ?? 0) >= 1 ? counters : nil
            }
            #expect(try await centerB.state(of: "org.reserved.x") == nil)

            // A last value from a, seen on b: everything before it has settled. Nothing looped: each bridge put
            // exactly the values set on its own host.
            try await centerA.setState(1, for: "org.example.marker")
            try await waitForState("org.example.marker", 1, on: centerB, "host b")
            // A bridge counts a put when the bucket acknowledges it and an import when its daemon answered, both
            // possibly after the other host saw the value: wait for the counts, then check they are exact.
            let countersA = try await poll("host a's counts", timeout: 20) {
                let now = try await statistics(of: bridgeA)
                return (now["state_exported"] ?? 0) >= 3 && (now["state_imported"] ?? 0) >= 2 ? now : nil
            }
            let countersB = try await poll("host b's counts", timeout: 20) {
                let now = try await statistics(of: bridgeB)
                return (now["state_exported"] ?? 0) >= 1 && (now["state_imported"] ?? 0) >= 3 ? now : nil
            }
            #expect(countersA["state_exported"] == 3, "7 (current at start), 8, the marker: \(countersA)")
            #expect(countersB["state_exported"] == 1, "9 only: \(countersB)")
            #expect(countersB["state_imported"] == 3, "7, 8, the marker: \(countersB)")
            #expect(countersA["state_imported"] == 2, "9 and the reserved name: \(countersA)")
            #expect(countersA["state_export_failed"] == 0 && countersB["state_export_failed"] == 0)
            let entry = try await kv.get("state.org.example.config")
            #expect(entry?.headers?["Notifyd-Origin-Host"] == "host-a", "the origin travels with the value")
            await centerA.close()
            await centerB.close()
            await nats.close()
        }
    }
}
