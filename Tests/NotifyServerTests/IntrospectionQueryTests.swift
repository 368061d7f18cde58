#if canImport(Glibc)
import Glibc
#endif
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Introspection over the protocol (PROTOCOL.md § 6.10, § 11.3).
@Suite("Introspection queries", .timeLimit(.minutes(TestScale.minutes(1))))
struct IntrospectionQueryTests {
    static let statusKeys: Set<String> = [
        "version", "instance_id", "pid", "uptime_seconds", "connections", "subscriptions", "subscribed_names", "patterns",
        "state_names", "retained_names", "posts", "deliveries", "posts_per_second", "deliveries_per_second", "merged",
        "dropped", "slow_consumer_disconnects", "resident_memory_bytes", "outbound_bytes", "held_bytes",
        "configuration_reloads", "accept_failures", "connections_refused",  // last_reload_error only after a failed reload
    ]
    static let clientKeys: Set<String> = [
        "connection", "pid", "uid", "gid", "command", "client_name", "subscriptions", "pending_bytes", "held_bytes",
        "suspended", "merged", "dropped", "lag_notifications", "lag_bytes", "lag_oldest_seconds",
    ]

    @Test("status: every documented key, with values that follow what the clients did")
    func status() async throws {
        try await withServer(everyUser: true) { server in
            let alice = try await server.connect("alice", as: .alice)
            let welcome = try await TestClient.connect(to: server.socketPath, name: "bob", as: .bob)
            let bobWelcome = try await welcome.hello()
            let bob = welcome
            try await alice.subscribe("org.example.a", id: 1)
            try await alice.subscribe("org.example.a", id: 2)
            try await alice.subscribe("org.example.>", id: 3)
            try await bob.subscribe("org.example.b", id: 1)
            try await bob.subscribe("org.example.>", id: 2)
            try await bob.setState("org.example.level", 3)
            try await bob.post("org.example.a", "1", retain: true)
            try await bob.post("org.example.c", "2")
            try await bob.post("org.other", "3")
            _ = try await alice.barrier()
            _ = try await bob.barrier()

            let object = try #require(try await alice.queryJSON(.status) as? [String: Any])
            #expect(Set(object.keys) == Self.statusKeys)
            let status = try await alice.query(DaemonStatus.self, .status)
            #expect(status.version == NotifyServer.version)
            #expect(status.instanceID == bobWelcome.instanceID.description)
            #expect(status.instanceID.count == 32 && status.instanceID.allSatisfy(\.isHexDigit))
            #expect(status.pid == UInt32(getpid()))
            #expect(status.uptimeSeconds >= 0)
            #expect(status.connections == 2)
            #expect(status.subscriptions == 5)
            #expect(status.subscribedNames == 2, "org.example.a and org.example.b")
            #expect(status.patterns == 2, "org.example.> on two connections")
            #expect(status.stateNames == 1)
            #expect(status.retainedNames == 1)
            #expect(status.posts == 3)
            #expect(status.deliveries == 4, "org.example.a to both, org.example.c to both, org.other to none")
            #expect(status.merged == 0 && status.dropped == 0 && status.slowConsumerDisconnects == 0)
            #expect(status.residentMemoryBytes > 1_000_000)
            #expect(status.outboundBytes == 0 && status.heldBytes == 0)
        }
    }

    @Test("names: exact subscribers, state (absent when none) and retained flag, sorted, filtered by a pattern")
    func names() async throws {
        try await withServer(everyUser: true) { server in
            let alice = try await server.connect("alice", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            try await alice.subscribe("org.example.b", id: 1)
            try await bob.subscribe("org.example.b", id: 1)
            try await bob.subscribe("org.example.b", id: 2)
            try await bob.subscribe("org.example.only.pattern.>", id: 3)
            try await alice.setState("org.example.a", 1)
            try await alice.post("org.example.c", "x", retain: true)
            try await alice.setState("net.example", 2)

            let all = try await bob.query([DaemonName].self, .names)
            #expect(
                all == [
                    .init(name: "net.example", subscribers: 0, state: 2, hasRetained: false),
                    .init(name: "org.example.a", subscribers: 0, state: 1, hasRetained: false),
                    .init(name: "org.example.b", subscribers: 2, state: nil, hasRetained: false),
                    .init(name: "org.example.c", subscribers: 0, state: nil, hasRetained: true),
                ])
            let filtered = try await bob.query([DaemonName].self, .names, "org.example.*")
            #expect(filtered.map(\.name) == ["org.example.a", "org.example.b", "org.example.c"])
            #expect(try await bob.query([DaemonName].self, .names, "nothing.>").isEmpty)

            let raw = try #require(try await bob.queryJSON(.names, "org.example.b") as? [[String: Any]])
            #expect(raw.count == 1)
            #expect(Set(raw.first.map { Array($0.keys) } ?? []) == ["name", "subscribers", "has_retained"], "no state key when there is none")

            let invalid = try await bob.expectError("QUERY names 'a..b'") { .query(requestID: $0, kind: QueryKind.names.rawValue, argument: "a..b") }
            #expect(invalid.code == .invalidRequest)
            #expect(!invalid.closesConnection)
        }
    }

    @Test("clients: root sees every connection, another uid only its own; the fields describe each connection")
    func clients() async throws {
        try await withServer(everyUser: true) { server in
            let root = try await server.connect("root-client")
            let alice1 = try await server.connect("alice-1", as: .alice)
            let alice2 = try await server.connect("alice-2", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            try await alice1.subscribe("org.example.>", id: 1)
            try await alice1.subscribe("org.example.a", id: 2)
            try await alice2.expectOK("SUSPEND") { .suspend(requestID: $0) }
            try await root.subscribe("org.example.a", id: 1)

            // Command names are read at the daemon's 50 ms tick, for the connections open then.
            let everyone = try await poll("every connection's command name", timeout: .seconds(TestScale.timeout(10))) {
                let clients = try await root.query([DaemonClient].self, .clients)
                return clients.count == 4 && clients.allSatisfy { $0.command != nil } ? clients : nil
            }
            #expect(everyone.map(\.clientName) == ["root-client", "alice-1", "alice-2", "bob"], "in connection order")
            #expect(everyone.map(\.uid) == [0, 4201, 4201, 4202])
            #expect(everyone.map(\.gid) == [0, 4301, 4301, 4302])
            #expect(everyone.map(\.connection) == everyone.map(\.connection).sorted())
            #expect(everyone.allSatisfy { $0.pid == UInt32(getpid()) })
            let comm = try String(contentsOfFile: "/proc/self/comm", encoding: .utf8).trimmingCharacters(in: .newlines)
            #expect(everyone.allSatisfy { $0.command == comm })
            #expect(everyone.map(\.subscriptions) == [1, 2, 0, 0])
            #expect(everyone.map(\.suspended) == [false, false, true, false])

            let seenByAlice = try await alice2.query([DaemonClient].self, .clients)
            #expect(seenByAlice.map(\.clientName) == ["alice-1", "alice-2"], "only uid 4201's connections, its own included")
            let seenByBob = try await bob.query([DaemonClient].self, .clients)
            #expect(seenByBob.map(\.clientName) == ["bob"])

            let raw = try #require(try await bob.queryJSON(.clients) as? [[String: Any]])
            #expect(Set(raw.first.map { Array($0.keys) } ?? []) == Self.clientKeys)
        }
    }

    @Test("clients: a subscriber that stopped reading shows its lag; once it reads again the lag is gone")
    func lag() async throws {
        // A 1 MB bound (8 MB by default), so that a few thousand posts overflow it: at 12,000 the test took most of
        // its minute under AddressSanitizer.
        try await withServer({ $0.outboundByteLimit = 1_000_000 }) { server in
            let stalled = try await server.connect("stalled", receiveBufferSize: 4_096)
            try await stalled.subscribe("org.example.lag", id: 1, policy: .queue(limit: 100_000))
            try await stalled.setReading(false)
            let observer = try await server.connect("observer")
            let poster = try await server.connect("poster")
            let payload = ByteBuffer(string: String(repeating: "x", count: 1_000))
            // In one write, and read back below in one wait: frame by frame, the test spent most of its time
            // waiting for a turn among the suites running alongside it.
            try await poster.send((0..<1_600).map { _ in
                .post(ClientFrame.Post(requestID: poster.nextRequestID(), name: "org.example.lag", payload: payload))
            })
            _ = try await poster.barrier()
            // 1.6 MB against a 1 MB bound: the daemon holds the rest under the queue policy (up to another 1 MB).
            let behind = try #require(try await observer.query([DaemonClient].self, .clients).first { $0.clientName == "stalled" })
            let lagBytes = try #require(behind.lagBytes)
            #expect(lagBytes == behind.pendingBytes + behind.heldBytes)
            #expect(lagBytes > 1_000_000)
            #expect(try #require(behind.lagNotifications) > 0, "notifications held: \(behind)")
            #expect(try #require(behind.lagOldestSeconds) > 0)
            let quiet = try #require(try await observer.query([DaemonClient].self, .clients).first { $0.clientName == "poster" })
            #expect(quiet.lagBytes == 0 && quiet.lagNotifications == 0 && quiet.lagOldestSeconds == 0)

            try await stalled.setReading(true)
            // Every notification, and nothing else (an OVERFLOW would mean the daemon dropped some).
            let received = NIOLockedValueBox((notifications: 0, other: [UInt8]()))
            let end = try await stalled.consumeFrames(timeout: .seconds(50)) { type, _ in
                received.withLockedValue { received in
                    if type == MessageType.notification.rawValue { received.notifications += 1 } else { received.other.append(type) }
                    return received.notifications < 1_600 && received.other.isEmpty
                }
            }
            let counted = received.withLockedValue { $0 }
            #expect(end == nil && counted.notifications == 1_600 && counted.other.isEmpty, "\(counted), end: \(String(describing: end))")
            let caughtUp = try await server.waitForStatus("the stalled client caught up") { $0.heldBytes == 0 && $0.outboundBytes == 0 }
            #expect(caughtUp.heldBytes == 0)
            let after = try #require(try await observer.query([DaemonClient].self, .clients).first { $0.clientName == "stalled" })
            #expect(after.lagBytes == 0 && after.lagNotifications == 0 && after.lagOldestSeconds == 0, "\(after)")
        }
    }

    @Test("an unknown query kind is invalid-request, not fatal")
    func unknownKind() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            let error = try await client.expectError("QUERY kind 7") { .query(requestID: $0, kind: 7, argument: "") }
            #expect(error.code == .invalidRequest)
            #expect(error.message == "unknown query kind 7 (1 status, 2 names, 3 clients)")
            try await client.expectQuiet("the connection stays usable")
        }
    }
}
