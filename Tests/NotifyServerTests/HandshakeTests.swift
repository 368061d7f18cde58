import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

@Suite("Handshake", .timeLimit(.minutes(TestScale.minutes(2))))
struct HandshakeTests {
    @Test("HELLO is answered by WELCOME with version 1, the daemon's pid, instance id and configured limits")
    func welcomeCarriesDaemonFacts() async throws {
        let limits = ServerLimits(
            maxNameLength: 200, maxPayloadLength: 4_000, maxFrameLength: 70_000, maxSubscriptions: 7)
        try await withServer({
            $0.limits = limits
            $0.serverName = "notifyd under test"
        }) { server in
            #expect(server.listeningAddress == server.socketPath)
            let client = try await server.connectRaw("handshake-client")
            let welcome = try await client.hello()

            #expect(welcome.version == 1)
            #expect(welcome.daemonPID == UInt32(getpid()))
            #expect(welcome.limits == limits)
            #expect(welcome.serverName == "notifyd under test")
            #expect(welcome.instanceID == server.server.instanceID)
            #expect(welcome.instanceID != InstanceID(high: 0, low: 0))
            // WELCOME is the only frame: nothing else arrives before the PONG.
            try await client.expectQuiet()

            let snapshot = try await server.snapshot()
            #expect(snapshot.clients.count == 1)
            let entry = try #require(snapshot.clients.first)
            #expect(entry.clientName == "handshake-client")
            #expect(entry.credentials == SenderCredentials(pid: UInt32(getpid()), uid: getuid(), gid: getgid()))
            #expect(entry.subscriptions == 0)
        }
    }

    @Test("The default limits are announced when none are configured")
    func defaultLimits() async throws {
        try await withServer { server in
            let client = try await server.connectRaw("defaults")
            let welcome = try await client.hello()
            #expect(welcome.limits == ServerLimits.default)
            #expect(welcome.serverName == "notifyd \(NotifyServer.version)")
        }
    }

    @Test("Every connection to one server sees the same instance id; two servers have different ones")
    func instanceIDsDifferBetweenServers() async throws {
        let first = try await TestServer.start()
        let second = try await TestServer.start()
        do {
            let a1 = try await first.connectRaw("a1").hello()
            let a2 = try await first.connectRaw("a2").hello()
            let b = try await second.connectRaw("b").hello()
            #expect(a1.instanceID == a2.instanceID)
            #expect(a1.instanceID == first.server.instanceID)
            #expect(b.instanceID == second.server.instanceID)
            #expect(first.server.instanceID != second.server.instanceID)
            #expect(a1.instanceID != b.instanceID)
        } catch {
            first.abandon()
            second.abandon()
            throw error
        }
        try await first.stop()
        try await second.stop()
    }

    @Test("A v1 daemon ignores HELLO flags and accepts any client name (long, cut to 255 bytes; with U+0000)")
    func lenientHelloFields() async throws {
        try await withServer { server in
            let longName = String(repeating: "n", count: 300)
            let first = try await server.connectRaw("flags")
            try await first.send(.hello(ClientFrame.Hello(flags: 0xFFFF_FFFF, clientName: "flags")))
            guard case .welcome = try await first.next() else {
                Issue.record("expected WELCOME for a HELLO with flags set")
                return
            }
            let second = try await server.connectRaw("long")
            try await second.send(.hello(ClientFrame.Hello(clientName: longName)))
            guard case .welcome = try await second.next() else {
                Issue.record("expected WELCOME for a 300-byte client name")
                return
            }
            let third = try await server.connectRaw("nul")
            try await third.send(.hello(ClientFrame.Hello(clientName: "a\u{0}b")))
            guard case .welcome = try await third.next() else {
                Issue.record("expected WELCOME for a client name containing U+0000")
                return
            }
            for client in [first, second, third] { try await client.expectQuiet() }
            // What the daemon keeps (for introspection and logs) is bounded: the first 255 bytes, whole characters.
            let names = try await server.snapshot().clients.map(\.clientName)
            #expect(names.contains(String(repeating: "n", count: 255)), "\(names.map(\.utf8.count))")
            #expect(names.allSatisfy { $0.utf8.count <= 255 })
        }
    }

    @Test("Requests pipelined right behind HELLO are answered after WELCOME, in order")
    func pipelinedRequestsAfterHello() async throws {
        try await withServer { server in
            let client = try await server.connectRaw("pipeliner")
            try await client.send(
                .hello(ClientFrame.Hello(clientName: "pipeliner")),
                .testSubscribe(requestID: 1, subscriptionID: 1, name: "org.example.pipelined"),
                .ping(requestID: 2))
            guard case .welcome = try await client.next() else {
                Issue.record("the first frame must be WELCOME")
                return
            }
            #expect(try await client.next() == .ok(requestID: 1))
            #expect(try await client.next() == .pong(requestID: 2))
            let snapshot = try await server.snapshot()
            #expect(snapshot.clients.first?.subscriptions == 1)
            #expect(snapshot.names == 1)
        }
    }
}
