#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Retained notifications (PROTOCOL.md § 6.2, § 7.11, § 9.5).
@Suite("Retained notifications", .timeLimit(.minutes(TestScale.minutes(1))))
struct RetainedNotificationTests {
    @Test("a new subscription with send-retained gets RETAINED before its OK, with the original sequence, sender and payload")
    func retainedBeforeOK() async throws {
        try await withServer(everyUser: true) { server in
            let poster = try await server.connect("poster", as: .alice)
            let first = try await poster.post("org.example.status", "starting", retain: true)
            let retained = try await poster.post("org.example.status", "up", retain: true)
            let later = try await poster.post("org.example.status", "not retained")
            #expect(first.sequence < retained.sequence && retained.sequence < later.sequence)

            let subscriber = try await server.connect("subscriber", as: .bob)
            let (reply, before) = try await subscriber.request {
                .subscribe(
                    ClientFrame.Subscribe(requestID: $0, subscriptionID: 9, flags: .sendRetained, pattern: "org.example.status"))
            }
            guard case .ok(let requestID) = reply else {
                Issue.record("expected OK, got \(reply.summary)")
                return
            }
            #expect(before.count == 1, "exactly one RETAINED before the OK: \(before.map(\.summary))")
            guard case .retained(let retainedRequest, let notification)? = before.first else {
                Issue.record("expected RETAINED before the OK, got \(before.map(\.summary))")
                return
            }
            #expect(retainedRequest == requestID, "RETAINED carries the SUBSCRIBE's request id")
            #expect(notification.sequence == retained.sequence, "the retained post's own (old) sequence number")
            #expect(notification.name == "org.example.status")
            #expect(notification.payloadText == "up", "the last post with retain, not the later post without it")
            #expect(notification.sender == SenderCredentials(pid: UInt32(getpid()), uid: 4201, gid: 4301))

            // The subscription is active once OK arrived: a new post comes as a plain NOTIFICATION.
            let next = try await poster.post("org.example.status", "down", retain: true)
            let live = try await subscriber.nextNotification()
            #expect(live.sequence == next.sequence)
            #expect(live.payloadText == "down")
        }
    }

    @Test("without send-retained a subscription gets nothing before its OK, and nothing afterwards")
    func withoutTheFlag() async throws {
        try await withServer(everyUser: true) { server in
            let poster = try await server.connect("poster")
            try await poster.post("org.example.status", "up", retain: true)
            let subscriber = try await server.connect("subscriber", as: .bob)
            let before = try await subscriber.subscribe("org.example.status", id: 1, retained: false)
            #expect(before.isEmpty, "got \(before.map(\.summary))")
            let pattern = try await subscriber.subscribe("org.example.>", id: 2, retained: false)
            #expect(pattern.isEmpty, "got \(pattern.map(\.summary))")
            try await subscriber.expectQuiet("retained notifications are only sent on request")
            // A name without a retained notification: OK alone even with the flag.
            let none = try await subscriber.subscribe("org.example.nothing", id: 3, retained: true)
            #expect(none.isEmpty, "got \(none.map(\.summary))")
        }
    }

    @Test("a pattern subscription gets the retained notification of every matching name, oldest first, and no others")
    func patternGetsAllMatching() async throws {
        try await withServer(everyUser: true) { server in
            let poster = try await server.connect("poster", as: .alice)
            let a1 = try await poster.post("org.example.a.state", "a1", retain: true)
            let b = try await poster.post("org.example.b.state", "b", retain: true)
            _ = try await poster.post("org.other.c.state", "other", retain: true)
            _ = try await poster.post("org.example.c.state", "c, not retained")
            _ = try await poster.post("org.example.a.b.state", "too deep for *", retain: true)
            let a2 = try await poster.post("org.example.a.state", "a2", retain: true)
            #expect(a1.sequence < b.sequence)

            let subscriber = try await server.connect("subscriber", as: .bob)
            let star = try await subscriber.subscribe("org.example.*.state", id: 1, retained: true)
            let starNames = star.compactMap(\.anyNotification).map { "\($0.name)=\($0.payloadText)#\($0.sequence)" }
            #expect(
                starNames == ["org.example.b.state=b#\(b.sequence)", "org.example.a.state=a2#\(a2.sequence)"],
                "ordered by the retained posts' sequence numbers")
            #expect(star.allSatisfy { if case .retained = $0 { true } else { false } })

            let rest = try await subscriber.subscribe("org.example.>", id: 2, retained: true)
            let restNames = rest.compactMap(\.anyNotification).map(\.name)
            #expect(restNames == ["org.example.b.state", "org.example.a.b.state", "org.example.a.state"])
        }
    }

    @Test("retained-bytes-per-uid: a retained post beyond the quota is refused and has no effect; replacing one's own frees its bytes; root is exempt")
    func retainedBytesQuota() async throws {
        // Each retained notification is charged its payload, its name and 512 bytes: quota.one with 6 bytes is 527.
        try await withServer(everyUser: true, { $0.access.quotas.retainedBytesPerUID = 1_057 }) { server in
            let alice = try await server.connect("alice", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            let root = try await server.connect("root")
            let watcher = try await server.connect("watcher", as: .bob)
            try await watcher.subscribe("quota.>", id: 1)

            try await alice.post("quota.one", "123456", retain: true)
            _ = try await watcher.nextNotification()
            let postsBefore = try await server.status().posts
            // 60 bytes on quota.two: 581 more, 1,108 in all.
            let refused = try await alice.postRefused("quota.two", String(repeating: "a", count: 60), retain: true)
            #expect(refused.code == .quotaExceeded)
            #expect(!refused.closesConnection)
            #expect(refused.message == "retaining this notification (581 bytes: its payload, its name and 512 per name) "
                + "would exceed uid 4201's quota of 1057 retained bytes, 527 in use (quota retained-bytes-per-uid)")
            try await watcher.expectQuiet("a refused post is not delivered")
            #expect(try await server.status().posts == postsBefore, "a refused post takes no sequence number")
            let two = try await watcher.subscribe("quota.two", id: 2, retained: true)
            #expect(two.isEmpty, "a refused post is not retained: \(two.map(\.summary))")

            // Replacing her own 527 bytes by 531 fits where adding them would not: the old charge is released first.
            try await alice.post("quota.one", "0123456789", retain: true)
            _ = try await watcher.nextNotification()
            let full = try await alice.postRefused("quota.four", "0123456789", retain: true)
            #expect(full.code == .quotaExceeded, "531 + 532 > 1,057")
            // Posts without retain are not limited by it.
            try await alice.post("quota.two", String(repeating: "x", count: 100))
            _ = try await watcher.nextNotification()
            // Another uid has its own quota; when bob replaces alice's retained notification, alice gets her bytes back.
            try await bob.post("quota.one", "b", retain: true)
            _ = try await watcher.nextNotification()
            try await alice.post("quota.three", "0123456789", retain: true)
            _ = try await watcher.nextNotification()
            // Root is exempt.
            try await root.post("quota.root", String(repeating: "r", count: 1_000), retain: true)
            _ = try await watcher.nextNotification()
        }
    }

    @Test("retained-bytes-per-uid bounds how many names a user fills with empty retained payloads, not only their bytes")
    func emptyRetainedPayloadsAreCharged() async throws {
        // Each empty payload keeps a name's entry in the daemon (about 400 bytes): without a charge for it, one user
        // could retain on millions of names within any quota, until the daemon ran out of memory.
        try await withServer(everyUser: true, { $0.access.quotas.retainedBytesPerUID = 16_384 }) { server in
            let alice = try await server.connect("alice", as: .alice)
            var kept = 0
            filling: while true {
                let name = "fill.n\(kept + 100_000)"  // 12 bytes: 524 each
                let (reply, _) = try await alice.request {
                    .post(ClientFrame.Post(requestID: $0, flags: [.ackWanted, .retain], name: name, payload: ByteBuffer()))
                }
                switch reply {
                case .posted: kept += 1
                case .error(let error):
                    #expect(error.code == .quotaExceeded, "\(error)")
                    break filling
                default: throw TestFailure("POST \(name): \(reply.summary)")
                }
                if kept > 10_000 { throw TestFailure("16,384 retained bytes held 10,000 empty payloads and more") }
            }
            #expect(kept == 16_384 / 524, "31 names of 12 bytes fit in 16,384 retained bytes, not \(kept)")
            // Replacing one of them costs nothing more.
            try await alice.post("fill.n100000", "", retain: true)
        }
    }

    @Test("a user over its retained quota (lowered, or charged anew after a hand-over) can still replace a value with one no larger")
    func replacementOverTheQuota() {
        var quotas = AccessConfiguration.Quotas()
        quotas.retainedBytesPerUID = 1_000
        let account = UserAccounts(quotas: quotas).account(for: 4_201)
        account.chargeRetained(5_000)
        #expect(account.checkRetained(600, replacing: 600) == nil, "the same charge")
        #expect(account.checkRetained(550, replacing: 600) == nil, "a smaller one")
        #expect(account.checkRetained(601, replacing: 600) != nil, "a larger one")
        #expect(account.checkRetained(524, replacing: 0) != nil, "a new name")
    }
}
