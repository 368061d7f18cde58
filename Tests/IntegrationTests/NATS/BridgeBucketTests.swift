import Foundation
import NIOCore
import Notify
import NotifyNATS
import NotifyTestSupport
import Testing

/// State values and retained notifications mirrored through a JetStream key-value bucket by real bridges between
/// real daemons.
@Suite("notifyd-bridge: state values and retained notifications through a key-value bucket", .serialized)
struct BridgeBucketTests {
    static let nobody: (uid: UInt32, gid: UInt32) = (65_534, 65_534)

    private func statistics(of bridge: ChildProcess) async throws -> [String: Int] {
        try await bridge.bridgeStatistics()
    }

    private func waitForState(_ name: String, _ value: UInt64, on center: NotifyCenter, _ host: String) async throws {
        _ = try await poll("\(name) = \(value) on \(host)", timeout: 20) {
            try await center.state(of: name) == value ? true : nil
        }
    }

    /// A NATS server with JetStream, storing in the scope's directory.
    private func jetStreamServer(in scope: IntegrationScope) async throws -> NATSServerProcess {
        try await NATSServerProcess.start(in: scope, arguments: ["-js", "-sd", scope.directory + "/jetstream"])
    }

    /// Host a: a daemon of its own socket and a center connected to it.
    private func startHostA(in scope: IntegrationScope) async throws -> (socket: String, center: NotifyCenter) {
        let socket = scope.directory + "/a.sock"
        _ = try await scope.startDaemon(socketPath: socket)
        return (socket, try await NotifyCenter.connect(configuration: .init(socketPath: socket)))
    }

    /// A bridge exporting and importing `org.>` between the daemon at `socket` and the bucket `fleet`.
    private func launchBucketBridge(
        in scope: IntegrationScope, socket: String, server: NATSServerProcess, hostID: String
    ) throws -> ChildProcess {
        try scope.launch(
            .bridge,
            ["--socket", socket, "--nats", server.url, "--export", "org.>", "--import", "org.>",
             "--kv-bucket", "fleet", "--host-id", hostID, "--log-level", "debug"])
    }

    @Test("values cross hosts both ways; a host that starts later gets the current ones; refusals and bad entries are counted; nothing loops")
    func mirrorsStates() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(in: scope)

            // Host a: a root bridge; a value set before it starts.
            let (socketA, centerA) = try await startHostA(in: scope)
            try await centerA.setState(7, for: "org.example.config")
            let bridgeA = try launchBucketBridge(in: scope, socket: socketA, server: server, hostID: "host-a")
            defer { bridgeA.send(SIGKILL) }
            try await bridgeA.waitForLine(containing: "mirroring state values and retained notifications")

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
                return (counters["state_refused"] ?? 0) >= 1 && (counters["bucket_invalid"] ?? 0) >= 1 ? counters : nil
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
            #expect(countersA["bucket_put_failed"] == 0 && countersB["bucket_put_failed"] == 0)
            let entry = try await kv.get("state.org.example.config")
            #expect(entry?.headers?["Notifyd-Origin-Host"] == "host-a", "the origin travels with the value")
            await centerA.close()
            await centerB.close()
            await nats.close()
        }
    }

    @Test("retained posts cross as retained, once; a host that starts later gets them; a restarted bridge does not post them again")
    func mirrorsRetained() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(in: scope)
            let (socketA, centerA) = try await startHostA(in: scope)
            _ = try await centerA.postAndWait("org.example.banner", text: "v1", retain: true)
            let bridgeA = try launchBucketBridge(in: scope, socket: socketA, server: server, hostID: "host-a")
            defer { bridgeA.send(SIGKILL) }
            try await bridgeA.waitForLine(containing: "bridge ready")
            let nats = try await NATSClient.connected(to: [server.url])
            let kv = try await nats.keyValue(bucket: "fleet", createIfMissing: false)
            _ = try await poll("host a's retained notification in the bucket", timeout: 20) {
                try await kv.get("retained.org.example.banner").map { String(buffer: $0.value) } == "v1" ? true : nil
            }

            // Host b starts later; an observer there sees what crosses.
            _ = try await scope.startDaemon()
            let centerB = try await NotifyCenter.connect(configuration: .init(socketPath: scope.socketPath))
            let seenOnB = Locked<[ReceivedNotification]>([])
            let observation = try centerB.observe("org.>", on: .immediate) { note in seenOnB.withLock { $0.append(note) } }
            defer { observation.cancel() }
            try await centerB.synchronize()
            func launchBridgeB() throws -> ChildProcess {
                try launchBucketBridge(in: scope, socket: scope.socketPath, server: server, hostID: "host-b")
            }
            var bridgeB = try launchBridgeB()
            defer { bridgeB.send(SIGKILL) }
            func waitOnB(for name: String, payload: String) async throws {
                _ = try await poll("\(name) \(payload) on host b", timeout: 20) {
                    seenOnB.withLock { $0.contains { $0.name == name && $0.payloadString == payload } } ? true : nil
                }
            }
            try await waitOnB(for: "org.example.banner", payload: "v1")
            try await bridgeB.waitForLine(containing: "bridge ready")

            // Live: a retained post and a plain one.
            _ = try await centerA.postAndWait("org.example.banner", text: "v2", retain: true)
            _ = try await centerA.postAndWait("org.example.plain", text: "p")
            try await waitOnB(for: "org.example.banner", payload: "v2")
            try await waitOnB(for: "org.example.plain", payload: "p")

            // The current value on b is a's post, with its origin.
            let current = Locked<[ReceivedNotification]>([])
            let reader = try centerB.observe(
                "org.example.banner", on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
            ) { note in current.withLock { $0.append(note) } }
            try await centerB.synchronize()
            reader.cancel()
            #expect(current.withLock { $0.map(\.payloadString) } == ["v2"])
            #expect(current.withLock { $0.first?.origin?.host } == "host-a", "the origin is kept with the retained post")

            // Bridge b restarts: the bucket holds what b's daemon already has, so nothing is posted again.
            bridgeB.send(SIGKILL)
            _ = try await bridgeB.waitForExit(timeout: 20)
            bridgeB = try launchBridgeB()
            try await bridgeB.waitForLine(containing: "applied the current entries of the key-value bucket")
            _ = try await centerA.postAndWait("org.example.marker", text: "m")
            try await waitOnB(for: "org.example.marker", payload: "m")
            let counters = try await poll("host b's counters", timeout: 20) {
                let now = try await statistics(of: bridgeB)
                return now["imported"] != nil ? now : nil
            }
            // Each once, none again after the restart. Retained posts cross through the bucket and the others on their
            // subjects, so the two are not ordered with each other (PROTOCOL.md § 16.2); each kind is in order.
            let seen = seenOnB.withLock { $0.map { "\($0.name)=\($0.payloadString ?? "")" } }
            #expect(
                seen.sorted() == ["org.example.banner=v1", "org.example.banner=v2", "org.example.marker=m", "org.example.plain=p"],
                "each post once, none again after the restart: \(seen)")
            #expect(seen.filter { $0.hasPrefix("org.example.banner") } == ["org.example.banner=v1", "org.example.banner=v2"])
            #expect(seenOnB.withLock { $0.filter { $0.name == "org.example.banner" }.map(\.origin?.host) } == ["host-a", "host-a"])
            #expect(counters["retained_imported"] == 0, "the restarted bridge posted nothing from the bucket: \(counters)")
            let countersA = try await statistics(of: bridgeA)
            #expect(countersA["retained_exported"] == 2, "v1 (held at start) and v2: \(countersA)")
            await centerA.close()
            await centerB.close()
            await nats.close()
        }
    }

    @Test("a local daemon that restarts under its bridge gets the bucket's values back; plain NATS clients' retained puts each arrive")
    func restoresAfterDaemonRestart() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(in: scope)
            let (socketA, centerA) = try await startHostA(in: scope)
            let bridgeA = try launchBucketBridge(in: scope, socket: socketA, server: server, hostID: "host-a")
            defer { bridgeA.send(SIGKILL) }
            try await bridgeA.waitForLine(containing: "applied the current entries")
            var daemonB = try await scope.startDaemon()
            let bridgeB = try launchBucketBridge(in: scope, socket: scope.socketPath, server: server, hostID: "host-b")
            defer { bridgeB.send(SIGKILL) }
            try await bridgeB.waitForLine(containing: "applied the current entries")
            try await centerA.setState(3, for: "org.example.level")
            _ = try await centerA.postAndWait("org.example.banner", text: "hello", retain: true)

            func current(_ name: String, on socket: String) async throws -> ReceivedNotification? {
                let center = try await NotifyCenter.connect(configuration: .init(socketPath: socket))
                let seen = Locked<[ReceivedNotification]>([])
                let observation = try center.observe(
                    name, on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
                ) { note in if note.isRetained { seen.withLock { $0.append(note) } } }
                try await center.synchronize()
                observation.cancel()
                await center.close()
                return seen.withLock { $0.last }
            }
            func waitForValues(on socket: String, _ what: String) async throws {
                _ = try await poll("the fleet's values on \(what)", timeout: 20) { () async throws -> Bool? in
                    let center = try await NotifyCenter.connect(configuration: .init(socketPath: socket))
                    let level = try await center.state(of: "org.example.level")
                    await center.close()
                    let banner = try await current("org.example.banner", on: socket)
                    return level == 3 && banner?.payloadString == "hello" ? true : nil
                }
            }
            try await waitForValues(on: scope.socketPath, "host b")

            // Host b's daemon dies and comes back empty; its bridge reconnects and applies the bucket again.
            daemonB.child.send(SIGKILL)
            _ = try await daemonB.child.waitForExit(timeout: 20)
            daemonB = try await scope.startDaemon()
            try await waitForValues(on: scope.socketPath, "host b's restarted daemon")
            #expect(try await current("org.example.banner", on: scope.socketPath)?.origin?.host == "host-a")

            // Retained puts from a plain NATS client carry no origin: each is a post of its own.
            let nats = try await NATSClient.connected(to: [server.url])
            let kv = try await nats.keyValue(bucket: "fleet", createIfMissing: false)
            _ = try await kv.put("retained.org.example.plain", value: Array("one".utf8))
            _ = try await poll("the first plain put on host b", timeout: 20) {
                try await current("org.example.plain", on: scope.socketPath)?.payloadString == "one" ? true : nil
            }
            _ = try await kv.put("retained.org.example.plain", value: Array("two".utf8))
            _ = try await poll("the second plain put on host b", timeout: 20) {
                try await current("org.example.plain", on: scope.socketPath)?.payloadString == "two" ? true : nil
            }
            await centerA.close()
            await nats.close()
        }
    }

    @Test("a name's state and retained value changed while the bridge waits on its daemon both arrive, the latest of each")
    func stateAndRetainedOfOneName() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(in: scope)
            let daemon = try await scope.startDaemon()
            let bridge = try launchBucketBridge(in: scope, socket: scope.socketPath, server: server, hostID: "host-b")
            defer { bridge.send(SIGKILL) }
            try await bridge.waitForLine(containing: "applied the current entries")
            let seen = try await statistics(of: bridge)["bucket_entries"] ?? 0

            // The daemon stops answering: the bridge's next apply (a state value) waits for it, and what the bucket
            // delivers meanwhile waits behind it: the retained value and a newer state value of the same name.
            daemon.child.send(SIGSTOP)
            let nats = try await NATSClient.connected(to: [server.url])
            let kv = try await nats.keyValue(bucket: "fleet", createIfMissing: false)
            _ = try await kv.put("state.org.example.both", value: Array("5".utf8))
            // Received, so taken by the applying task (a wake-up away), which then waits on the stopped daemon.
            _ = try await poll("the bridge to receive the first entry", timeout: 20) {
                (try await statistics(of: bridge)["bucket_entries"] ?? 0) >= seen + 1 ? true : nil
            }
            _ = try await kv.put("retained.org.example.both", value: Array("banner".utf8))
            _ = try await kv.put("state.org.example.both", value: Array("6".utf8))
            _ = try await poll("the bridge to receive the three entries", timeout: 20) {
                (try await statistics(of: bridge)["bucket_entries"] ?? 0) >= seen + 3 ? true : nil
            }
            daemon.child.send(SIGCONT)

            let center = try await NotifyCenter.connect(configuration: .init(socketPath: scope.socketPath))
            _ = try await poll("state 6 and the retained banner on the daemon", timeout: 20) { () async throws -> Bool? in
                let seenRetained = Locked<[String]>([])
                let observation = try center.observe(
                    "org.example.both", on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
                ) { note in if note.isRetained { seenRetained.withLock { $0.append(note.payloadString ?? "") } } }
                try await center.synchronize()
                observation.cancel()
                let state = try await center.state(of: "org.example.both")
                return state == 6 && seenRetained.withLock({ $0 }) == ["banner"] ? true : nil
            }
            await center.close()
            await nats.close()
        }
    }

    @Test("a bucket deleted and created again under running bridges gets each host's values back, and changes cross it both ways although its revisions started over")
    func survivesReplacedBucket() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(in: scope)
            let socketA = scope.directory + "/a.sock"
            let daemonA = try await scope.startDaemon(socketPath: socketA)
            let centerA = try await NotifyCenter.connect(configuration: .init(socketPath: socketA))
            let bridgeA = try launchBucketBridge(in: scope, socket: socketA, server: server, hostID: "host-a")
            defer { bridgeA.send(SIGKILL) }
            try await bridgeA.waitForLine(containing: "applied the current entries")
            _ = try await scope.startDaemon()
            let centerB = try await NotifyCenter.connect(configuration: .init(socketPath: scope.socketPath))
            let bridgeB = try launchBucketBridge(in: scope, socket: scope.socketPath, server: server, hostID: "host-b")
            defer { bridgeB.send(SIGKILL) }
            try await bridgeB.waitForLine(containing: "applied the current entries")
            // Host c exports only: no watch of the bucket tells its bridge when the bucket is replaced.
            let socketC = scope.directory + "/c.sock"
            _ = try await scope.startDaemon(socketPath: socketC)
            let centerC = try await NotifyCenter.connect(configuration: .init(socketPath: socketC))
            let bridgeC = try scope.launch(
                .bridge,
                ["--socket", socketC, "--nats", server.url, "--export", "org.c.>", "--kv-bucket", "fleet",
                 "--host-id", "host-c", "--log-level", "debug"])
            defer { bridgeC.send(SIGKILL) }
            try await bridgeC.waitForLine(containing: "mirroring state values and retained notifications")
            try await centerC.setState(4, for: "org.c.level")

            // Puts from elsewhere first (one key, so the new bucket gets it back once), so that host a's put of the
            // level has a revision the new bucket's first puts do not reach.
            let nats = try await NATSClient.connected(to: [server.url])
            let kv = try await nats.keyValue(bucket: "fleet", createIfMissing: false)
            for k in 1...20 { _ = try await kv.put("state.org.example.filler", value: Array("\(k)".utf8)) }
            try await waitForState("org.example.filler", 20, on: centerA, "host a")
            try await centerA.setState(5, for: "org.example.level")
            _ = try await centerA.postAndWait("org.example.banner", text: "hello", retain: true)
            try await waitForState("org.example.level", 5, on: centerB, "host b")
            let oldRevision = try #require(try await kv.get("state.org.example.level")?.revision)
            #expect(oldRevision > 20)
            try await waitForState("org.c.level", 4, on: centerA, "host a")

            // Deleted and created again at once, as an administrator resetting it would.
            try await nats.deleteBucketStream("fleet")
            let fresh = try await nats.keyValue(bucket: "fleet")
            for (bridge, host) in [(bridgeA, "host a"), (bridgeB, "host b"), (bridgeC, "host c")] {
                // A watch notices when its consumer's heartbeats stop (about 10 s); an exporting bridge asks.
                _ = try await poll("\(host)'s bridge to find the bucket replaced", timeout: 60) {
                    (try await statistics(of: bridge)["bucket_replaced"] ?? 0) >= 1 ? true : nil
                }
            }

            // Each host's own values are in the new bucket again, as a bridge starting against it would put them.
            _ = try await poll("host a's and host c's values in the new bucket", timeout: 20) {
                () async throws -> Bool? in
                let level = try await fresh.get("state.org.example.level").map { String(buffer: $0.value) }
                let levelC = try await fresh.get("state.org.c.level").map { String(buffer: $0.value) }
                let banner = try await fresh.get("retained.org.example.banner")
                guard level == "5", levelC == "4", let banner, String(buffer: banner.value) == "hello" else {
                    return nil
                }
                return banner.headers?["Notifyd-Origin-Host"] == "host-a" ? true : nil
            }
            // Changes cross the new bucket both ways, at revisions below the old bucket's.
            try await centerB.setState(9, for: "org.example.level")
            try await waitForState("org.example.level", 9, on: centerA, "host a")
            try await centerA.setState(2, for: "org.example.other")
            try await waitForState("org.example.other", 2, on: centerB, "host b")
            let newRevision = try #require(try await fresh.get("state.org.example.level")?.revision)
            #expect(newRevision < oldRevision, "the new bucket's revisions started over")
            // Host c's changes go into the new bucket too.
            try await centerC.setState(6, for: "org.c.level")
            try await waitForState("org.c.level", 6, on: centerA, "host a")

            // Host a's daemon dies and comes back empty: its bridge, whose watch has ended once, still starts over
            // for it, and the daemon gets back the values host a put itself.
            daemonA.child.send(SIGKILL)
            _ = try await daemonA.child.waitForExit(timeout: 20)
            _ = try await scope.startDaemon(socketPath: socketA)
            let restartedA = try await NotifyCenter.connect(configuration: .init(socketPath: socketA))
            _ = try await poll(
                "host a's own value back on its restarted daemon", timeout: 30, interval: .milliseconds(100)
            ) {
                try await restartedA.state(of: "org.example.other") == 2 ? true : nil
            }
            await restartedA.close()
            await centerA.close()
            await centerB.close()
            await centerC.close()
            await nats.close()
        }
    }
}
