import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// A lookup that blocks its callers while closed, and says how many are blocked.
private final class LookupGate: @unchecked Sendable {  // every field is guarded by `condition`
    private let condition = NSCondition()
    private var isOpen = true
    private var blocked = 0

    func pass() {
        condition.lock()
        defer { condition.unlock() }
        guard !isOpen else { return }
        blocked += 1
        condition.broadcast()
        while !isOpen { condition.wait() }
        blocked -= 1
    }

    func close() {
        condition.lock()
        isOpen = false
        condition.unlock()
    }

    func open() {
        condition.lock()
        isOpen = true
        condition.broadcast()
        condition.unlock()
    }

    var blockedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return blocked
    }

    /// Waits until a lookup is blocked; throws after `timeout` seconds.
    func waitUntilBlocked(timeout: Double = 10) throws {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while blocked == 0 {
            if !condition.wait(until: deadline) { throw TestFailure("no lookup blocked within \(timeout) s") }
        }
    }
}

@Suite("Identity lookups off the event loop", .timeLimit(.minutes(TestScale.minutes(2))))
struct IdentityLookupTests {
    @Test("A client whose group lookup hangs delays only itself: the others keep posting and receiving")
    func hangingLookupDelaysOnlyItsConnection() async throws {
        let gate = LookupGate()
        let lookup = PeerIdentityLookup(
            groups: { _, gid in
                gate.pass()
                return [gid]
            },
            command: { _ in "hanging-lookup-test" },
            groupCacheSeconds: 0)
        try await withServer({ $0.identityLookup = lookup }) { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("org.example.lookup", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            gate.close()
            let stuck = try await TestClient.connect(to: server.socketPath, name: "stuck")
            try await stuck.send(.hello(ClientFrame.Hello(version: ProtocolConstants.version, clientName: "stuck")))
            try gate.waitUntilBlocked()

            // While the newcomer's lookup hangs, everyone else is served as usual.
            for index in 0..<100 {
                _ = try await poster.postAcked("org.example.lookup", payload: [UInt8(index)], requestID: UInt32(index + 10))
            }
            for index in 0..<100 {
                #expect(try await subscriber.nextNotification().payload == ByteBuffer(bytes: [UInt8(index)]))
            }
            let clients = try await Self.clients(of: poster)
            #expect(gate.blockedCount == 1, "the newcomer's lookup was still hanging meanwhile")

            // Once its lookup returns, the newcomer is served, with what the lookup found.
            gate.open()
            guard case .welcome = try await stuck.next() else { throw TestFailure("expected WELCOME") }
            let listed = try await Self.clients(of: poster)
            #expect(clients.contains { $0.clientName == "poster" && $0.command == "hanging-lookup-test" })
            #expect(listed.contains { $0.clientName == "stuck" && $0.command == "hanging-lookup-test" })
        }
    }

    private static func clients(of client: TestClient) async throws -> [DaemonClient] {
        try await client.send(.query(requestID: 99, kind: QueryKind.clients.rawValue, argument: ""))
        guard case .queryResult(99, let json) = try await client.next() else { throw TestFailure("expected QUERY_RESULT") }
        return try JSONDecoder().decode([DaemonClient].self, from: Data(json.readableBytesView))
    }

    @Test("A user's groups are found once: its next connection is served while a command lookup hangs")
    func cachedGroupsServeAtOnce() async throws {
        let gate = LookupGate()
        let lookup = PeerIdentityLookup(
            groups: { _, gid in [gid] },
            command: { _ in
                gate.pass()
                return "slow-proc"
            })
        try await withServer({ $0.identityLookup = lookup }) { server in
            let first = try await server.connect("first")
            gate.close()
            let second = try await server.connect("second")  // HELLO answered: the groups came from the cache
            try gate.waitUntilBlocked()
            #expect(try await Self.clients(of: first).contains { $0.clientName == "second" && $0.command == nil })
            gate.open()
            try await second.expectQuiet()
        }
    }

    @Test("The system lookup finds this process's command and its primary group")
    func systemLookup() {
        #expect(PeerIdentityLookup.system.command(UInt32(getpid())) != nil)
        #expect(PeerIdentityLookup.system.groups(getuid(), getgid()).contains(getgid()))
        #expect(PeerIdentityLookup.system.command(0) == nil)
    }
}
