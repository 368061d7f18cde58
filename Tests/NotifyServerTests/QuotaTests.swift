import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Per-uid quotas (PROTOCOL.md § 11.2): connections, subscriptions and outbound bytes, with clear errors,
/// so one user cannot exhaust the daemon for another. Root is exempt. (Retained bytes and state names are in
/// the retained-notification and state suites.)
@Suite("Per-uid quotas", .timeLimit(.minutes(TestScale.minutes(2))))
struct QuotaTests {
    @Test("connections-per-uid: the connection beyond the quota gets ERROR quota-exceeded as its only frame and is closed; other uids and root are not limited")
    func connections() async throws {
        try await withServer(everyUser: true, { $0.access.quotas.connectionsPerUID = 2 }) { server in
            let first = try await server.connect("alice-1", as: .alice)
            _ = try await server.connect("alice-2", as: .alice)
            let third = try await TestClient.connect(to: server.socketPath, name: "alice-3", as: .alice)
            let (frames, end) = try await third.framesUntilEnd()
            #expect(end == .endOfFile, "the daemon closes the refused connection")
            #expect(frames.count == 1, "only one frame, before anything was read: \(frames.map(\.summary))")
            guard case .error(let error)? = frames.first else {
                Issue.record("expected ERROR, got \(frames.map(\.summary))")
                return
            }
            #expect(error.code == .quotaExceeded)
            #expect(error.closesConnection)
            #expect(error.requestID == 0)
            #expect(error.message == "uid 4201 already has the maximum of 2 connections (quota connections-per-uid)")

            // Another uid and root are unaffected.
            _ = try await server.connect("bob-1", as: .bob)
            _ = try await server.connect("bob-2", as: .bob)
            for index in 0..<5 { _ = try await server.connect("root-\(index)") }

            // Closing one of alice's connections makes room for another.
            await first.close()
            try await server.waitForStatus("alice's first connection closed") { $0.connections == 8 }
            let again = try await server.connect("alice-4", as: .alice)
            try await again.expectQuiet("alice's new connection works")
        }
    }

    @Test("subscriptions-per-uid: counted over all connections of the uid; freed by UNSUBSCRIBE and by closing; root is exempt")
    func subscriptions() async throws {
        try await withServer(everyUser: true, { $0.access.quotas.subscriptionsPerUID = 3 }) { server in
            let alice1 = try await server.connect("alice-1", as: .alice)
            let alice2 = try await server.connect("alice-2", as: .alice)
            try await alice1.subscribe("quota.a", id: 1)
            try await alice1.subscribe("quota.>", id: 2)
            try await alice2.subscribe("quota.b", id: 1)
            let refused = try await alice2.subscribeRefused("quota.c", id: 2)
            #expect(refused.code == .quotaExceeded)
            #expect(!refused.closesConnection)
            #expect(refused.message == "uid 4201 already holds the maximum of 3 subscriptions (quota subscriptions-per-uid)")
            #expect(try await alice1.subscribeRefused("quota.c", id: 3).code == .quotaExceeded)

            let bob = try await server.connect("bob", as: .bob)
            for id in 1...3 { try await bob.subscribe("quota.bob.\(id)", id: UInt32(id)) }
            let root = try await server.connect("root")
            for id in 1...10 { try await root.subscribe("quota.root.\(id)", id: UInt32(id)) }

            try await alice1.unsubscribe(id: 1)
            try await alice2.subscribe("quota.c", id: 2)
            #expect(try await alice2.subscribeRefused("quota.d", id: 3).code == .quotaExceeded)
            await alice2.close()
            try await server.waitForStatus("alice-2 closed") { $0.connections == 3 }
            try await alice1.subscribe("quota.d", id: 3)
            try await alice1.subscribe("quota.e", id: 4)
            #expect(try await alice1.subscribeRefused("quota.f", id: 5).code == .quotaExceeded)
        }
    }

    @Test("pattern-labels-per-uid: a pattern's labels are charged to its user over all connections; exact names and a repeated pattern cost nothing; freed by UNSUBSCRIBE and by closing; root is exempt")
    func patternLabels() async throws {
        try await withServer(everyUser: true, { $0.access.quotas.patternLabelsPerUID = 10 }) { server in
            let alice1 = try await server.connect("alice-1", as: .alice)
            let alice2 = try await server.connect("alice-2", as: .alice)
            try await alice1.subscribe("q.*.a.>", id: 1)  // 3 labels (q, *, a; `>` ends at its parent)
            try await alice1.subscribe("q.*.a.>", id: 2)  // the same pattern again on this connection: free
            try await alice1.subscribe("exact.name.with.five.labels", id: 3)  // exact names are not in the trie
            try await alice2.subscribe("r.*.b.c.d", id: 1)  // 5 labels: 8 in all
            let refused = try await alice2.subscribeRefused("s.*.t", id: 2)  // 3 more would make 11
            #expect(refused.code == .quotaExceeded && !refused.closesConnection)
            #expect(
                refused.message
                    == "uid 4201's patterns already hold 8 labels and this one has 3; the maximum is 10 (quota pattern-labels-per-uid)")
            try await alice2.subscribe("s.*", id: 3)  // 2 labels: exactly 10

            let root = try await server.connect("root")
            for id in 1...20 { try await root.subscribe("root.*.\(id).>", id: UInt32(id)) }

            try await alice1.unsubscribe(id: 1)  // the pattern is still held by subscription 2
            #expect(try await alice1.subscribeRefused("u.*", id: 4).code == .quotaExceeded)
            try await alice1.unsubscribe(id: 2)  // now its 3 labels are free
            try await alice1.subscribe("u.*.v", id: 4)
            await alice2.close()
            try await server.waitForStatus("alice-2 closed") { $0.connections == 2 }
            try await alice1.subscribe("w.*.x.y.z", id: 5)  // alice-2's 7 labels came back
        }
    }

    @Test("outbound-bytes-per-uid: two stalled connections of one uid together stay within it, while another uid's subscriber receives everything")
    func outboundBytes() async throws {
        let perConnection = 128 * 1_024
        let perUID = 160 * 1_024
        let total = 1_500
        try await withServer(everyUser: true, {
            $0.outboundByteLimit = perConnection
            $0.access.quotas.outboundBytesPerUID = perUID
        }) { server in
            var stalled: [TestClient] = []
            for index in 1...2 {
                let client = try await server.connect("alice-\(index)", as: .alice, receiveBufferSize: 4_096)
                try await client.subscribe("org.flood", id: 1, policy: .queue(limit: 100_000))
                try await client.setReading(false)
                stalled.append(client)
            }
            let reader = try await server.connect("bob", as: .bob)
            try await reader.subscribe("org.flood", id: 1)
            let poster = try await server.connect("poster")
            try await DeliveryPolicyTests.flood(
                server: server, poster: poster, reader: reader, names: ["org.flood"], total: total)

            let clients = try await poster.query([DaemonClient].self, .clients)
            let alice = clients.filter { $0.uid == 4201 }
            #expect(alice.count == 2)
            let used = alice.reduce(0) { $0 + $1.pendingBytes + $1.heldBytes }
            #expect(used <= perUID, "alice's connections use \(used) bytes together, quota \(perUID)")
            #expect(alice.reduce(0) { $0 + $1.dropped } > 0, "what did not fit was evicted and counted")
            let bob = try #require(clients.first { $0.uid == 4202 })
            #expect(bob.dropped == 0 && bob.merged == 0, "bob lost nothing")

            // When they read again, each stalled connection learns of its losses: received + evicted == posted.
            for client in stalled {
                try await client.setReading(true)
                var received = 0
                var evicted: UInt64 = 0
                var lastCounter = -1
                while received + Int(evicted) < total {
                    let frame = try await client.next()
                    switch frame {
                    case .notification(let n):
                        received += 1
                        let counter = Int(n.payloadText.split(separator: "|").first ?? "") ?? -1
                        #expect(counter > lastCounter, "\(client.name): in order")
                        lastCounter = counter
                    case .overflow(let subscription, let dropped):
                        #expect(subscription == 0, "evictions for the bound are reported for the whole connection")
                        evicted += dropped
                    default:
                        Issue.record("\(client.name): unexpected \(frame.summary)")
                    }
                }
                #expect(received + Int(evicted) == total, "\(client.name): received \(received), evicted \(evicted)")
            }
        }
    }
}
