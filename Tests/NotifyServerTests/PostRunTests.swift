import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Runs of posts to one name in one read are fanned out together (`PostRun`); what a client sees must be
/// exactly what one fan-out per post would give.
@Suite("Runs of posts", .timeLimit(.minutes(TestScale.minutes(2))))
struct PostRunTests {
    private static func post(_ name: String, _ index: Int, flags: PostFlags = []) -> ClientFrame {
        .post(ClientFrame.Post(requestID: UInt32(index), flags: flags, name: name, payload: ByteBuffer(string: "\(index)")))
    }

    /// Reads `count` notifications and returns (name, payload text, sequence) for each.
    private static func receive(_ count: Int, from client: TestClient) async throws -> [(String, String, UInt64)] {
        var received: [(String, String, UInt64)] = []
        for _ in 0..<count {
            let notification = try await client.nextNotification()
            received.append((notification.name, String(buffer: notification.payload), notification.sequence))
        }
        return received
    }

    @Test("Interleaved runs in one write arrive complete, in posting order, with consecutive sequence numbers")
    func interleavedRunsKeepOrder() async throws {
        try await withServer { server in
            // One exact subscription to each name plus a pattern over both: still one copy per post.
            let both = try await server.connect("both")
            try await both.subscribe("run.a", subscriptionID: 1, requestID: 1)
            try await both.subscribe("run.b", subscriptionID: 2, requestID: 2)
            try await both.subscribe("run.>", subscriptionID: 3, requestID: 3)
            let onlyB = try await server.connect("only-b")
            try await onlyB.subscribe("run.b", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            // Long runs (past the run's byte limit), short runs and single posts, all in one write.
            var frames: [ClientFrame] = []
            var expected: [(String, String)] = []
            var index = 0
            for (name, length) in [("run.a", 3_000), ("run.b", 1), ("run.a", 2), ("run.b", 500), ("elsewhere.nobody", 7), ("run.a", 1)] {
                for _ in 0..<length {
                    index += 1
                    frames.append(Self.post(name, index))
                    if name != "elsewhere.nobody" { expected.append((name, "\(index)")) }
                }
            }
            try await poster.send(frames)

            let received = try await Self.receive(expected.count, from: both)
            #expect(received.map(\.0) == expected.map(\.0))
            #expect(received.map(\.1) == expected.map(\.1))
            // Every post took a sequence number in order, including the ones nobody observed.
            let sequences = received.map(\.2)
            #expect(sequences.first == 1)
            #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $0 < $1 })
            #expect(sequences.last == UInt64(index))
            try await both.expectQuiet()

            let onlyBReceived = try await Self.receive(501, from: onlyB)
            #expect(onlyBReceived.allSatisfy { $0.0 == "run.b" })
            #expect(onlyBReceived.map(\.1) == expected.filter { $0.0 == "run.b" }.map(\.1))
            try await onlyB.expectQuiet()
            try await poster.expectQuiet()
        }
    }

    @Test("Notifications from a run are byte for byte the documented NOTIFICATION encoding")
    func runBytesAreTheDocumentedEncoding() async throws {
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("run.bytes.é", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")
            let payloads: [[UInt8]] = [[], Array("x".utf8), Array(repeating: 0xFF, count: 3_000), Array("last".utf8)]
            try await poster.send(
                payloads.enumerated().map { index, payload in
                    .post(ClientFrame.Post(requestID: UInt32(index), name: "run.bytes.é", payload: ByteBuffer(bytes: payload)))
                })
            for (index, payload) in payloads.enumerated() {
                let received = try await subscriber.nextReceived()
                var expected = ByteBuffer()
                NotificationFrame.encode(
                    sequence: UInt64(index + 1), sender: ownCredentials, name: "run.bytes.é",
                    payload: ByteBuffer(bytes: payload), into: &expected)
                #expect(received.bytes == expected, "post \(index + 1)")
            }
            try await subscriber.expectQuiet()
        }
    }

    @Test("A poster that observes its own name gets a run's notifications before the reply to its next request")
    func runEndsBeforeTheNextRequest() async throws {
        try await withServer { server in
            let client = try await server.connect("self-observer")
            try await client.subscribe("run.self", subscriptionID: 1, requestID: 1)
            var frames = (1...200).map { Self.post("run.self", $0) }
            frames.append(.ping(requestID: 77))
            frames += (201...210).map { Self.post("run.self", $0) }
            frames.append(Self.post("run.self", 211, flags: .ackWanted))
            try await client.send(frames)

            for index in 1...200 {
                let frame = try await client.next()
                #expect(String(buffer: try #require(frame.notification, "got \(frame.summary)").payload) == "\(index)")
            }
            #expect(try await client.next() == .pong(requestID: 77), "PONG follows the notifications posted before PING")
            for index in 201...211 {
                let frame = try await client.next()
                #expect(String(buffer: try #require(frame.notification, "got \(frame.summary)").payload) == "\(index)")
            }
            guard case .posted(211, let sequence, 1) = try await client.next() else {
                Issue.record("expected POSTED(211) delivered to 1 after its own notification")
                return
            }
            #expect(sequence == 211)
        }
    }

    @Test("A bad post inside a run is refused alone; the posts around it are delivered")
    func badPostInsideARun() async throws {
        try await withServer({ $0.limits.maxPayloadLength = 16 }) { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("run.checked", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")
            var frames = (1...5).map { Self.post("run.checked", $0) }
            frames.append(
                .post(ClientFrame.Post(requestID: 6, name: "run.checked", payload: ByteBuffer(repeating: 0x41, count: 17))))
            frames += (7...9).map { Self.post("run.checked", $0) }
            frames.append(Self.post("run.checked", 10, flags: PostFlags(rawValue: 0x80)))
            frames += (11...12).map { Self.post("run.checked", $0) }
            try await poster.send(frames)

            #expect(try await poster.nextError().code == .payloadTooLarge)
            #expect(try await poster.nextError().code == .unsupportedFlags)
            let received = try await Self.receive(10, from: subscriber)
            #expect(received.map(\.1) == ["1", "2", "3", "4", "5", "7", "8", "9", "11", "12"])
            try await subscriber.expectQuiet()
            try await poster.expectQuiet()
        }
    }

    @Test("A plain post that starts a run from its bytes passes the checks of a decoded post: access rules, the handshake")
    func runStartIsChecked() async throws {
        try await withServer(everyUser: true) { server in
            let root = try await server.connect("root")
            try await root.subscribe("user.4201.inbox", subscriptionID: 1, requestID: 1)
            try await root.subscribe("run.open", subscriptionID: 2, requestID: 2)
            // bob spreads his posts over names with subscribers: each post starts a run; alice's name is refused.
            let bob = try await server.connect("bob", as: .bob)
            try await bob.send([
                Self.post("run.open", 1), Self.post("user.4201.inbox", 2), Self.post("run.open", 3),
                Self.post("user.4201.inbox", 4),
            ])
            for requestID: UInt32 in [2, 4] {
                let refused = try await bob.nextError()
                #expect(refused.code == .permissionDenied && refused.requestID == requestID, "\(refused)")
            }
            #expect(try await Self.receive(2, from: root).map(\.1) == ["1", "3"])
            try await root.expectQuiet("bob's posts under user.4201. reached nobody")

            let early = try await server.connectRaw("no-hello")
            try await early.send(Self.post("run.open", 5))
            let (frames, _) = try await early.framesUntilEnd()
            #expect(frames.compactMap(\.errorFrame).map(\.code) == [.handshakeRequired], "\(frames.map(\.summary))")
            try await root.expectQuiet("a post before HELLO reached nobody")
        }
    }

    @Test("Posts to names with one subscriber each, alone or in bursts, arrive in posting order with consecutive sequence numbers")
    func alonePostsKeepOrder() async throws {
        try await withServer { server in
            var subscribers: [TestClient] = []
            for index in 0..<3 {
                let client = try await server.connect("subscriber-\(index)")
                for name in 0..<4 {
                    try await client.subscribe("alone.s\(index).n\(name)", subscriptionID: UInt32(name + 1), requestID: UInt32(name + 1))
                }
                subscribers.append(client)
            }
            // A pattern elsewhere: it matches none of these names, so each still has its one subscriber alone.
            let elsewhere = try await server.connect("elsewhere")
            try await elsewhere.subscribe("elsewhere.>", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")
            var frames: [ClientFrame] = []
            var expected: [[String]] = [[], [], []]
            var index = 0
            let add = { (subscriber: Int, name: Int) in
                index += 1
                frames.append(Self.post("alone.s\(subscriber).n\(name)", index))
                expected[subscriber].append("\(index)")
            }
            // Spread posts (each alone), bursts (the second post in a row to a name starts a run), spread again.
            for round in 0..<30 { add(round % 3, round % 4) }
            for subscriber in 0..<3 { for _ in 0..<5 { add(subscriber, 1) } }
            for round in 0..<12 { add(round % 3, (round + 1) % 4) }
            try await poster.send(frames)
            // A second write that goes on with the name the first ended on, then spreads again.
            frames.removeAll()
            for _ in 0..<3 { add(2, 0) }
            for round in 0..<6 { add(round % 3, 3) }
            try await poster.send(frames)

            var sequences: [UInt64] = []
            for (subscriber, client) in subscribers.enumerated() {
                let received = try await Self.receive(expected[subscriber].count, from: client)
                #expect(received.map(\.1) == expected[subscriber], "subscriber \(subscriber)")
                let own = received.map(\.2)
                #expect(zip(own, own.dropFirst()).allSatisfy { $0 < $1 }, "subscriber \(subscriber): sequences in order")
                sequences += own
                try await client.expectQuiet()
            }
            #expect(sequences.sorted() == Array(1...UInt64(index)), "every post took the next sequence number")
            let snapshot = try await server.snapshot()
            #expect(snapshot.posts == UInt64(index) && snapshot.deliveries == UInt64(index))
            // The spread posts went alone (the bursts' first posts too): what this test is about.
            #expect(try await withBroker(of: server.server) { $0.postsServedAlone } >= 30 + 12)
            try await elsewhere.expectQuiet()
        }
    }

    @Test("A suspended subscriber holds posts that would have gone to it alone, and gets them all, in order, on RESUME")
    func alonePostsToASuspendedSubscriber() async throws {
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            for name in 0..<3 {
                try await subscriber.subscribe("alone.held.n\(name)", id: UInt32(name + 1), policy: .queue(limit: 1_000))
            }
            try await subscriber.send(.suspend(requestID: 10))
            #expect(try await subscriber.next() == .ok(requestID: 10))
            let poster = try await server.connect("poster")
            try await poster.send((1...30).map { Self.post("alone.held.n\($0 % 3)", $0) })
            try await poster.expectQuiet()
            try await subscriber.expectQuiet("nothing reaches a suspended subscriber")

            try await subscriber.send(.resume(requestID: 11))
            var payloads: [String] = []
            while payloads.count < 30 {
                let frame = try await subscriber.next()
                if frame == .ok(requestID: 11) { continue }
                payloads.append(String(buffer: try #require(frame.notification, "got \(frame.summary)").payload))
            }
            #expect(payloads == (1...30).map { "\($0)" })
            try await subscriber.expectQuiet()
        }
    }

    @Test("A poster that asked not to get its own posts does not, when it is its name's one subscriber")
    func alonePostHonoursNoEcho() async throws {
        try await withServer { server in
            let quiet = try await server.connectRaw("quiet")
            try await quiet.send(.hello(ClientFrame.Hello(flags: HelloFlags.noEcho, clientName: "quiet")))
            guard case .welcome = try await quiet.next() else { throw TestFailure("no WELCOME") }
            try await quiet.subscribe("alone.echo", subscriptionID: 1, requestID: 1)
            try await quiet.send([Self.post("alone.echo", 1), Self.post("alone.elsewhere", 2), Self.post("alone.echo", 3)])
            try await quiet.expectQuiet("its own posts did not come back")
            let other = try await server.connect("other")
            try await other.send(Self.post("alone.echo", 4))
            #expect(try await Self.receive(1, from: quiet).map(\.1) == ["4"])
        }
    }

    @Test("Runs held for a suspended subscriber coalesce into one NOTIFICATION_MERGED counting every post")
    func heldRunsCoalesce() async throws {
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("run.held", subscriptionID: 1, requestID: 1)
            try await subscriber.send(.suspend(requestID: 2))
            #expect(try await subscriber.next() == .ok(requestID: 2))
            let poster = try await server.connect("poster")
            // Two runs in separate writes: the first starts holding, the second finds the connection holding.
            try await poster.send((1...300).map { Self.post("run.held", $0) })
            try await poster.expectQuiet()
            try await poster.send((301...700).map { Self.post("run.held", $0) })
            try await poster.expectQuiet()
            try await subscriber.expectQuiet()

            try await subscriber.send(.resume(requestID: 3))
            var frames: [ServerFrame] = []
            while true {
                let frame = try await subscriber.next()
                if frame == .ok(requestID: 3) { continue }
                frames.append(frame)
                if case .notificationMerged = frame { break }
                if case .notification = frame { break }
            }
            guard case .notificationMerged(let mergedCount, let notification) = frames.last else {
                Issue.record("expected NOTIFICATION_MERGED, got \(frames.map(\.summary))")
                return
            }
            #expect(mergedCount == 699, "the last post stands for itself and the 699 before it")
            #expect(String(buffer: notification.payload) == "700")
            #expect(notification.sequence == 700)
            try await subscriber.expectQuiet()
        }
    }
}
