import Foundation
import NIOCore
import NIOPosix
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
            _ = try await Self.clients(of: poster, until: "poster")
            #expect(gate.blockedCount == 1, "the newcomer's lookup was still hanging meanwhile")

            // Once its lookup returns, the newcomer is served, with what the lookup found.
            gate.open()
            guard case .welcome = try await stuck.next() else { throw TestFailure("expected WELCOME") }
            _ = try await Self.clients(of: poster, until: "stuck")
        }
    }

    /// Queries `client`'s connections until the one named `clientName` shows the command this suite's lookups give.
    private static func clients(of client: TestClient, until clientName: String) async throws -> [DaemonClient] {
        try await poll("\(clientName)'s command name", timeout: .seconds(TestScale.timeout(10))) {
            let clients = try await Self.clients(of: client)
            return clients.contains { $0.clientName == clientName && $0.command == "hanging-lookup-test" } ? clients : nil
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

    /// bob (uid 4202, primary group 4302) is in group 4300 only by what the lookup finds.
    static let groupRule = "reserve com.example.grp owner=4201 group=4300 post=group observe=all"

    /// Whether `client` may post the group-only name now.
    private static func mayPost(_ client: TestClient) async throws -> Bool {
        let (reply, _) = try await client.request {
            .post(.init(requestID: $0, flags: .ackWanted, name: "com.example.grp", payload: ByteBuffer()))
        }
        if case .posted = reply { return true }
        guard case .error(let error) = reply, error.code == .permissionDenied else {
            throw TestFailure("expected POSTED or permission-denied, got \(reply.summary)")
        }
        return false
    }

    @Test("Connections of a user whose lookup hangs share one lookup, are served at its deadline, and get the groups when it answers")
    func hungLookupHasADeadline() async throws {
        let gate = LookupGate()
        let calls = Counter()
        let lookup = PeerIdentityLookup(
            groups: { uid, gid in
                calls.increment()
                gate.pass()
                return uid == 4202 ? [gid, 4300] : [gid]
            },
            command: { _ in "deadline-test" },
            groupCacheSeconds: 0, answerDeadlineSeconds: 0.3)
        let access = try parseAccess(Self.groupRule)
        try await withServer(everyUser: true, { $0.identityLookup = lookup; $0.access = access }) { server in
            gate.close()
            // Each gets WELCOME although the lookup hangs (before: none did until it returned).
            var bobs: [TestClient] = []
            for index in 0..<3 { bobs.append(try await server.connect("bob \(index)", as: .bob)) }
            #expect(calls.value == 1, "\(calls.value) lookups for one user's three connections")
            #expect(try await !Self.mayPost(bobs[0]), "served with the primary group only while the lookup hangs")
            gate.open()
            _ = try await poll("the groups to reach the connections served without them", timeout: .seconds(TestScale.timeout(10))) {
                try await Self.mayPost(bobs[2]) ? true : nil
            }
            #expect(try await Self.mayPost(bobs[0]))
        }
    }

    @Test("A failed lookup is not cached: the user's next connection looks again and gets its groups")
    func failedLookupIsNotCached() async throws {
        let calls = Counter()
        let lookup = PeerIdentityLookup(
            groups: { uid, gid in
                // The NSS source fails once (sssd restarting), then answers.
                calls.increment() == 1 ? nil : (uid == 4202 ? [gid, 4300] : [gid])
            },
            command: { _ in "failing-lookup-test" },
            groupCacheSeconds: 60)
        let access = try parseAccess(Self.groupRule)
        try await withServer(everyUser: true, { $0.identityLookup = lookup; $0.access = access }) { server in
            let first = try await server.connect("bob 1", as: .bob)
            #expect(try await !Self.mayPost(first), "the failed lookup leaves the primary group only")
            let second = try await server.connect("bob 2", as: .bob)
            #expect(calls.value == 2, "the failure was cached: \(calls.value) lookups")
            #expect(try await Self.mayPost(second))
        }
    }

    @Test("A connection handed over before its groups were known gets them from the successor's lookup")
    func handedOverBeforeItsGroups() async throws {
        let gate = LookupGate()
        let hanging = PeerIdentityLookup(
            groups: { uid, gid in
                gate.pass()
                return uid == 4202 ? [gid, 4300] : [gid]
            },
            command: { _ in "handover-lookup-test" }, groupCacheSeconds: 0, answerDeadlineSeconds: 0.3)
        let answering = PeerIdentityLookup(
            groups: { uid, gid in uid == 4202 ? [gid, 4300] : [gid] }, command: { _ in "successor" })
        let access = try parseAccess(Self.groupRule)
        let first = try await TestServer.start(everyUser: true) {
            $0.identityLookup = hanging
            $0.access = access
        }
        gate.close()
        let bob = try await first.connect("bob", as: .bob)
        #expect(try await !Self.mayPost(bob), "served with the primary group only while the lookup hangs")
        let (incoming, listener) = try await HandoverTests.takeOver(first.socketPath)
        gate.open()
        try await first.waitUntilFinished()
        let successor = try await TestServer.start(socketPath: first.socketPath, handover: incoming) {
            $0.listenAddress = .inheritedDescriptor(listener, path: first.socketPath)
            $0.identityLookup = answering
            $0.access = access
        }
        _ = try await poll("the successor to find the handed-over connection's groups", timeout: .seconds(TestScale.timeout(10))) {
            try await Self.mayPost(bob) ? true : nil
        }
        await bob.close()
        try await successor.stop()
    }

    @Test("Connections that close while their user's lookup hangs are not kept: a client reconnecting in a loop costs nothing that lasts")
    func closedConnectionsDoNotPileUp() async throws {
        let gate = LookupGate()
        gate.close()
        let lookup = PeerIdentityLookup(
            groups: { _, gid in
                gate.pass()
                return [gid]
            },
            command: { _ in nil })
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        // The resolver lives on its event loop, as in the server.
        let (lookups, kept) = try await loop.submit {
            let resolver = PeerIdentityResolver(eventLoop: loop, pool: pool, lookup: lookup)
            let credentials = SenderCredentials(pid: 1, uid: 4202, gid: 4302)
            // One connection stays; 1,000 more come and go while the lookup hangs.
            resolver.resolve(credentials, groupsFound: { _ in }, commandFound: { _ in }, isWaiting: { true })
            for _ in 0..<1_000 {
                resolver.resolve(credentials, groupsFound: { _ in }, commandFound: { _ in }, isWaiting: { false })
            }
            return (resolver.groupLookups, resolver.waitingConnections)
        }.get()
        #expect(lookups == 1)
        #expect(kept <= 128, "\(kept) connections kept for one hung lookup")
        gate.open()
        try await pool.shutdownGracefully()
        try await group.shutdownGracefully()
    }

    @Test("The system lookup finds this process's command and its primary group")
    func systemLookup() {
        #expect(PeerIdentityLookup.system.command(UInt32(getpid())) != nil)
        #expect(PeerIdentityLookup.system.groups(getuid(), getgid())?.contains(getgid()) == true)
        #expect(PeerIdentityLookup.system.command(0) == nil)
    }
}

/// A count shared with lookups on the pool's threads.
private final class Counter: @unchecked Sendable {  // guarded by `lock`
    private let lock = NSLock()
    private var count = 0

    /// Adds one; returns the new count.
    @discardableResult
    func increment() -> Int { lock.withLock { count += 1; return count } }

    var value: Int { lock.withLock { count } }
}
