import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Wildcard subscriptions (PROTOCOL.md § 8.1, § 9.2).
@Suite("Pattern subscriptions", .timeLimit(.minutes(TestScale.minutes(1))))
struct PatternSubscriptionTests {
    /// For each pattern: names it must match and names it must not (PROTOCOL.md § 8.1's table, plus edge cases).
    static let cases: [(pattern: String, matches: [String], misses: [String])] = [
        ("org.example.*.changed", ["org.example.disk.changed", "org.example.net.changed"],
         ["org.example.changed", "org.example.disk.sub.changed", "org.example.disk.changed.more", "org.other.disk.changed"]),
        ("org.*", ["org.a"], ["org", "org.a.b"]),
        ("org.>", ["org.a", "org.a.b", "org.a.b.c"], ["org", "orgx.a", "x.org.a"]),
        ("*", ["a", "org"], ["a.b"]),
        ("*.*", ["a.b"], ["a", "a.b.c"]),
        ("*.x", ["a.x", "org.x"], ["x", "a.b.x", "a.x.y"]),
        ("*.>", ["a.b", "a.b.c"], ["a"]),
        ("a.*.c.>", ["a.b.c.d", "a.x.c.d.e"], ["a.b.c", "a.b.x.d"]),
        (">", ["a", "a.b.c", "日本.語"], []),
        ("日本.*", ["日本.語"], ["日本", "日本.語.x"]),
    ]

    @Test("'*' stands for exactly one label and '>' for one or more trailing labels", arguments: 0..<cases.count)
    func matching(index: Int) async throws {
        let (pattern, matches, misses) = Self.cases[index]
        try await withServer(everyUser: true) { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe(pattern, id: 1)
            let poster = try await server.connect("poster")
            var expected: [UInt64: String] = [:]
            // Interleave matching and non-matching posts, so a miss between two hits would show up.
            for name in (matches + misses).sorted() {
                let posted = try await poster.post(name, name)
                let shouldMatch = matches.contains(name)
                #expect(posted.delivered == (shouldMatch ? 1 : 0), "'\(pattern)' vs '\(name)': delivered_count \(posted.delivered)")
                if shouldMatch { expected[posted.sequence] = name }
            }
            let frames = try await subscriber.barrier()
            let received = frames.compactMap { frame -> String? in
                guard case .notification(let n) = frame else { return "unexpected \(frame.summary)" }
                return expected[n.sequence] == n.name ? n.name : "wrong #\(n.sequence) \(n.name)"
            }
            #expect(received == matches.sorted(), "pattern '\(pattern)'")
        }
    }

    @Test("exact and pattern subscriptions coexist; a connection whose several subscriptions match gets each post once and counts once")
    func oncePerConnection() async throws {
        try await withServer(everyUser: true) { server in
            let exactOnly = try await server.connect("exact")
            try await exactOnly.subscribe("org.example.a", id: 1)
            let patternOnly = try await server.connect("pattern")
            try await patternOnly.subscribe("org.example.>", id: 1)
            let everything = try await server.connect("everything")
            try await everything.subscribe("org.example.a", id: 1)
            try await everything.subscribe("org.example.a", id: 2)
            try await everything.subscribe("org.example.>", id: 3)
            try await everything.subscribe("*.example.a", id: 4)
            try await everything.subscribe(">", id: 5)
            let poster = try await server.connect("poster")

            let posted = try await poster.post("org.example.a", "hello")
            #expect(posted.delivered == 3, "three connections, however many subscriptions each")
            for client in [exactOnly, patternOnly, everything] {
                let frames = try await client.barrier()
                #expect(frames.count == 1, "\(client.name) got \(frames.map(\.summary))")
                #expect(frames.first?.anyNotification?.sequence == posted.sequence)
            }
            let status = try await server.status()
            #expect(status.deliveries == 3)
            #expect(status.subscribedNames == 1, "one name with exact subscribers")
            #expect(status.patterns == 4, "org.example.> twice (two connections), *.example.a and >")

            // Only a pattern reaches org.example.b: the exact-only connection gets nothing.
            let other = try await poster.post("org.example.b", "b")
            #expect(other.delivered == 2)
            try await exactOnly.expectQuiet("org.example.b matches none of its subscriptions")
        }
    }

    @Test("unsubscribing a pattern stops it; another subscription of the same connection keeps delivering")
    func unsubscribe() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client")
            try await client.subscribe("org.example.a", id: 1)
            try await client.subscribe("org.example.>", id: 2)
            try await client.subscribe("org.example.>", id: 3)
            let poster = try await server.connect("poster")

            try await client.unsubscribe(id: 2)
            #expect(try await poster.post("org.example.b", "1").delivered == 1, "id 3 still holds the same pattern")
            #expect(try await client.barrier().count == 1)
            try await client.unsubscribe(id: 3)
            #expect(try await poster.post("org.example.b", "2").delivered == 0, "no pattern left")
            #expect(try await poster.post("org.example.a", "3").delivered == 1, "the exact subscription remains")
            let frames = try await client.barrier()
            #expect(frames.map { $0.anyNotification?.payloadText } == ["3"])
            try await client.unsubscribe(id: 1)
            #expect(try await poster.post("org.example.a", "4").delivered == 0)
            try await client.expectQuiet("every subscription is gone")
            #expect(try await server.status().patterns == 0)

            let unknown = try await client.expectError("UNSUBSCRIBE 2 again") { .unsubscribe(requestID: $0, subscriptionID: 2) }
            #expect(unknown.code == .unknownSubscription)
        }
    }

    @Test("invalid patterns are refused with invalid-name, and the connection stays usable", arguments: [
        "a.>.b", "a..b", ">.a", ">.>", "org.ex*", "org.**", "org.>>", "org.a>", ".>", "org.*.", "", "self.>", "self.*",
    ])
    func invalidPatterns(pattern: String) async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client")
            let error = try await client.subscribeRefused(pattern, id: 1)
            #expect(error.code == .invalidName, "'\(pattern)': \(error)")
            #expect(!error.closesConnection)
            // The id was not taken by the refused subscription.
            try await client.subscribe("org.valid.>", id: 1)
        }
    }

    @Test("a post names one name: wildcards in a POST are invalid-name")
    func postWithWildcards() async throws {
        try await withServer(everyUser: true) { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe(">", id: 1)
            let poster = try await server.connect("poster")
            for name in ["org.example.*", "org.>", "*", ">"] {
                let error = try await poster.postRefused(name)
                #expect(error.code == .invalidName, "POST '\(name)': \(error)")
            }
            try await subscriber.expectQuiet("refused posts reach nobody")
        }
    }
}
