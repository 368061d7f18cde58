import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// One connection's pipelined requests are served a bounded number per turn of the event loop, in order,
/// whatever arrives at once: a client that sends thousands of subscriptions in one write cannot hold the
/// loop from everyone else (issue 15: a batch of 4,096 SUBSCRIBEs stalled other clients ~90 ms).
@Suite("Fair share of the event loop", .timeLimit(.minutes(TestScale.minutes(2))))
struct FairnessTests {
    /// Sends `requests` (request ids 1, 2, … in order) and then `more` in one write, and expects `OK` for each
    /// request, in order.
    private static func pipeline(
        _ requests: [ClientFrame], then more: [ClientFrame] = [], expectingOKFrom client: TestClient
    ) async throws {
        var bytes = ByteBuffer()
        for frame in requests + more { frame.encode(into: &bytes) }
        // The daemon takes the burst as fast as it serves it (slowly under a sanitizer): what is waited for is each
        // answer, one timeout per answer, not the whole write at once.
        let written = client.startSending(bytes)
        for index in 1...requests.count {
            let frame = try await client.next()
            guard case .ok(UInt32(index)) = frame else { throw TestFailure("expected OK(\(index)), got \(frame.summary)") }
        }
        try await written.get()
    }

    @Test("5,000 pipelined SUBSCRIBEs and a PING: all answered in order, at most framesPerTurn served per turn")
    func pipelinedSubscriptionsAreServedInSlices() async throws {
        try await withServer { server in
            let client = try await server.connectRaw("pipeliner")
            try await client.hello()
            let count = 5_000
            let subscribes: [ClientFrame] = (1...count).map { index in
                .testSubscribe(
                    requestID: UInt32(index), subscriptionID: UInt32(index), name: "org.example.*.label\(index).>")
            }
            try await Self.pipeline(subscribes, then: [.ping(requestID: UInt32(count + 1))], expectingOKFrom: client)
            guard case .pong(UInt32(count + 1)) = try await client.next() else { throw TestFailure("no PONG last") }

            let entry = try #require(try await server.snapshot().clients.first { $0.clientName == "pipeliner" })
            #expect(entry.subscriptions == count)
            #expect(
                entry.mostFramesInOneTurn <= PeerChannelHandler.framesPerTurn,
                "\(entry.mostFramesInOneTurn) frames served in one turn")
            // The bound was reached, so the batch really was cut into slices (the test exercised the limit).
            #expect(entry.mostFramesInOneTurn == PeerChannelHandler.framesPerTurn)
        }
    }

    /// A subscriber of the names `prefix.n1` … `prefix.n<count>`: through one pattern, or one exact subscription each.
    private static func subscriber(
        of count: Int, prefix: String, exactly: Bool, on server: TestServer, name: String = "subscriber"
    ) async throws -> TestClient {
        let subscriber = try await server.connectRaw(name)
        try await subscriber.hello()
        guard exactly else {
            try await subscriber.subscribe("\(prefix).>", id: 1, policy: .queue(limit: 10_000))
            return subscriber
        }
        var subscriptions = ByteBuffer()
        for index in 1...count {
            ClientFrame.testSubscribe(
                requestID: UInt32(index), subscriptionID: UInt32(index), name: "\(prefix).n\(index)", policy: .queue(limit: 10)
            ).encode(into: &subscriptions)
        }
        try await subscriber.sendBuffer(subscriptions)
        for index in 1...count {
            guard case .ok(UInt32(index)) = try await subscriber.next() else { throw TestFailure("no OK for SUBSCRIBE \(index)") }
        }
        return subscriber
    }

    /// 5,000 posts, each to another of `prefix`'s names, pipelined in one write: all delivered in order, and at
    /// most `perTurn` served in one turn (the bound reached).
    private static func expectSpreadPostsServed(
        _ perTurn: Int, prefix: String, exactly: Bool, subscribers: Int = 1, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await withServer { server in
            let count = 5_000
            var others: [TestClient] = []
            for index in 1..<subscribers {
                others.append(try await Self.subscriber(of: count, prefix: prefix, exactly: exactly, on: server, name: "other-\(index)"))
            }
            let subscriber = try await Self.subscriber(of: count, prefix: prefix, exactly: exactly, on: server)
            let poster = try await server.connectRaw("poster")
            try await poster.hello()
            var bytes = ByteBuffer()
            for index in 1...count {
                ClientFrame.post(.init(requestID: 0, name: "\(prefix).n\(index)", payload: ByteBuffer(string: "\(index)")))
                    .encode(into: &bytes)
            }
            ClientFrame.ping(requestID: 1).encode(into: &bytes)
            try await poster.sendBuffer(bytes)
            guard case .pong(1) = try await poster.next() else { throw TestFailure("no PONG after the posts") }
            for index in 1...count {
                let notification = try await subscriber.nextNotification()
                #expect(notification.name == "\(prefix).n\(index)", "notification \(index) out of order", sourceLocation: sourceLocation)
            }
            let entry = try #require(try await server.snapshot().clients.first { $0.clientName == "poster" })
            #expect(
                entry.mostFramesInOneTurn <= perTurn + 1, "\(entry.mostFramesInOneTurn) posts served in one turn",
                sourceLocation: sourceLocation)
            #expect(entry.mostFramesInOneTurn >= perTurn, "the bound was never reached", sourceLocation: sourceLocation)
        }
    }

    @Test("5,000 pipelined posts, each to another name: all delivered in order, at most runStartsPerTurn served per turn")
    func postsToManyNamesAreServedInSlices() async throws {
        try await Self.expectSpreadPostsServed(PeerChannelHandler.runStartsPerTurn, prefix: "many", exactly: false)
    }

    @Test("5,000 pipelined posts, each to another name with one exact subscriber: in order, at most postsAlonePerTurn a turn")
    func postsToManySubscribedNamesAreServedInSlices() async throws {
        try await Self.expectSpreadPostsServed(PeerChannelHandler.postsAlonePerTurn, prefix: "exact", exactly: true)
    }

    @Test("the same with two exact subscribers per name: each post starts a run from its bytes, at most runStartsPerTurn a turn")
    func postsToManyNamesWithTwoSubscribersAreServedInSlices() async throws {
        try await Self.expectSpreadPostsServed(PeerChannelHandler.runStartsPerTurn, prefix: "pair", exactly: true, subscribers: 2)
    }

    @Test("a poster spreading over names has each name hashed once: lookups take the hash its loading ahead computed")
    func spreadPostsHashEachNameOnce() async throws {
        try await withServer { server in
            let count = 2_000
            let subscriber = try await Self.subscriber(of: count, prefix: "hashed", exactly: true, on: server)
            let before = try await withBroker(of: server.server) { ($0.index.exactNamesHashed, $0.index.exactNamesLoadedAhead) }
            let poster = try await server.connectRaw("poster")
            try await poster.hello()
            // Other frames among the posts (a PING every 7th) must not put the hashes out of step with the frames.
            var bytes = ByteBuffer()
            for index in 1...count {
                ClientFrame.post(.init(requestID: 0, name: "hashed.n\(index)", payload: ByteBuffer())).encode(into: &bytes)
                if index % 7 == 0 { ClientFrame.ping(requestID: UInt32(index)).encode(into: &bytes) }
            }
            ClientFrame.ping(requestID: 0).encode(into: &bytes)
            try await poster.sendBuffer(bytes)
            for index in 1...count {
                #expect(try await subscriber.nextNotification().name == "hashed.n\(index)")
            }
            while true {
                guard case .pong(let requestID) = try await poster.next() else { throw TestFailure("expected PONG") }
                if requestID == 0 { break }
            }
            let after = try await withBroker(of: server.server) { ($0.index.exactNamesHashed, $0.index.exactNamesLoadedAhead) }
            let (hashed, loadedAhead) = (after.0 - before.0, after.1 - before.1)
            // Loading ahead starts once a group of 16 frames has shown the spread (the first group is looked up
            // without), and covers only the whole frames already read (the rest of a group cut by the end of a read
            // is looked up without): most names, however the kernel cuts the reads. Either way each name is hashed
            // once: by its loading ahead, or by its lookup.
            #expect(loadedAhead >= count / 2, "\(loadedAhead) of \(count) posts' names loaded ahead")
            #expect(hashed <= count + count / 20, "\(hashed) names hashed for \(count) posts: lookups hashed again")
        }
    }

    @Test("posts and requests share one budget per turn: 1,000 of each, interleaved, are served about 50 pairs a turn")
    func postsAndRequestsShareTheBudget() async throws {
        try await withServer { server in
            let poster = try await server.connectRaw("mixer")
            try await poster.hello()
            let pairs = 1_000
            var bytes = ByteBuffer()
            for index in 1...pairs {
                ClientFrame.post(.init(requestID: 0, name: "mixed.n\(index)", payload: ByteBuffer())).encode(into: &bytes)
                ClientFrame.ping(requestID: UInt32(index)).encode(into: &bytes)
            }
            try await poster.sendBuffer(bytes)
            for index in 1...pairs {
                guard case .pong(UInt32(index)) = try await poster.next() else { throw TestFailure("expected PONG(\(index))") }
            }
            let entry = try #require(try await server.snapshot().clients.first { $0.clientName == "mixer" })
            // A pair costs a request and a run start; separate budgets would allow 64 of each (128 frames).
            let pairsPerTurn = PeerChannelHandler.turnBudget / (PeerChannelHandler.requestCost + PeerChannelHandler.runStartCost)
            #expect(entry.mostFramesInOneTurn <= 2 * pairsPerTurn + 2, "\(entry.mostFramesInOneTurn) frames served in one turn")
        }
    }

    @Test("a peer that closes its side while frames wait for the next turn still gets every answer, then EOF")
    func halfCloseWhileDeferred() async throws {
        try await withServer { server in
            let client = try await server.connectRaw("half-closer")
            try await client.hello()
            var bytes = ByteBuffer()
            for index in 1...2_000 { ClientFrame.ping(requestID: UInt32(index)).encode(into: &bytes) }
            try await client.sendAndShutdownOutput(bytes)
            for index in 1...2_000 {
                let frame = try await client.next()
                guard case .pong(UInt32(index)) = frame else { throw TestFailure("expected PONG(\(index)), got \(frame.summary)") }
            }
            #expect(try await client.expectEnd() == .endOfFile)
        }
    }

    @Test("posts that many patterns match count by their matching work: the poster is served a few per turn")
    func expensiveMatchesAreServedInSlices() async throws {
        try await withServer { server in
            // Root: no pattern quota. 4,096 patterns of 16 one-letter labels, all matching one name and
            // branching at every level: a post to that name visits tens of thousands of trie nodes.
            let subscriber = try await server.connectRaw("patterns")
            try await subscriber.hello()
            let subscribes: [ClientFrame] = (0..<4_096).map { index in
                let labels = (0..<16).map { (index >> ($0 % 12)) & 1 == 1 ? "*" : "l" }
                return .testSubscribe(
                    requestID: UInt32(index + 1), subscriptionID: UInt32(index + 1), name: labels.joined(separator: "."))
            }
            try await Self.pipeline(subscribes, expectingOKFrom: subscriber)

            let poster = try await server.connectRaw("poster")
            try await poster.hello()
            let name = Array(repeating: "l", count: 16).joined(separator: ".")
            var posts = ByteBuffer()
            for index in 1...100 {
                ClientFrame.post(.init(requestID: UInt32(index), flags: .ackWanted, name: name, payload: ByteBuffer()))
                    .encode(into: &posts)
            }
            try await poster.sendBuffer(posts)
            for index in 1...100 {
                let frame = try await poster.next()
                guard case .posted(UInt32(index), _, 1) = frame else { throw TestFailure("expected POSTED(\(index)) to 1, got \(frame.summary)") }
            }
            let snapshot = try await server.snapshot()
            let entry = try #require(snapshot.clients.first { $0.clientName == "poster" })
            // A match of this name visits every node; a turn allows patternVisitsPerTurn visits, so a few posts
            // per turn (plus the one that crosses the bound), not all 100.
            let perTurn = 2 + PeerChannelHandler.patternVisitsPerTurn / snapshot.patternNodes
            #expect(snapshot.patternNodes > 20_000, "\(snapshot.patternNodes) nodes")
            #expect(
                entry.mostFramesInOneTurn <= perTurn,
                "\(entry.mostFramesInOneTurn) costly posts served in one turn; at most \(perTurn) expected")
        }
    }

    @Test("subscriptions asking for the current values of a pattern pay for the names they scan: a few per turn")
    func currentValueScansAreServedInSlices() async throws {
        try await withServer { server in
            // 20,000 state values, set by root in one pipelined burst.
            let setter = try await server.connectRaw("setter")
            try await setter.hello()
            let sets: [ClientFrame] = (0..<20_000).map { index in
                .setState(requestID: UInt32(index + 1), name: "s.\(index)", value: UInt64(index))
            }
            try await Self.pipeline(sets, expectingOKFrom: setter)

            // 100 state subscriptions to a pattern that matches nothing, each asking for current values: each
            // scans every state name.
            let scanner = try await server.connectRaw("scanner")
            try await scanner.hello()
            let subscribes: [ClientFrame] = (1...100).map { index in
                .testSubscribe(
                    requestID: UInt32(index), subscriptionID: UInt32(index), name: "none.>", flags: [.states, .sendRetained])
            }
            try await Self.pipeline(subscribes, expectingOKFrom: scanner)
            let snapshot = try await server.snapshot()
            let entry = try #require(snapshot.clients.first { $0.clientName == "scanner" })
            let perTurn = 2 + PeerChannelHandler.patternVisitsPerTurn / 20_000
            #expect(
                entry.mostFramesInOneTurn <= perTurn,
                "\(entry.mostFramesInOneTurn) scanning subscriptions served in one turn; at most \(perTurn) expected")
        }
    }
}
