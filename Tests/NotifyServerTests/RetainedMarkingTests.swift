import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Marked retained posts (PROTOCOL.md § 6.2 marks-retained flag, § 7.11, § 9.5): a connection whose matching
/// subscriptions include a marking one receives a post made with retain as `RETAINED(0)` instead of a
/// `NOTIFICATION`; and a retained post keeps its relay origin.
@Suite("Marked retained posts", .timeLimit(.minutes(TestScale.minutes(1))))
struct RetainedMarkingTests {
    static let origin = RelayOrigin(host: "web-1", uid: 1_000, gid: 100, pid: 4_242, sequence: 77)

    /// An acknowledged post, with retain when asked.
    static func post(_ requestID: UInt32, _ name: String, _ text: String, retain: Bool = false) -> ClientFrame {
        .post(
            ClientFrame.Post(
                requestID: requestID, flags: retain ? [.ackWanted, .retain] : .ackWanted, name: name,
                payload: ByteBuffer(string: text)))
    }

    /// A post nobody acknowledges (runs of posts are made of these), with retain when asked.
    static func unacknowledged(_ requestID: UInt32, _ name: String, _ text: String, retain: Bool = false) -> ClientFrame {
        .post(
            ClientFrame.Post(
                requestID: 0x8000_0000 | requestID, flags: retain ? .retain : PostFlags(rawValue: 0), name: name,
                payload: ByteBuffer(string: text)))
    }

    /// A relayed post (origin flag) made with retain, acknowledged.
    static func relayed(_ requestID: UInt32, _ name: String, _ text: String) -> ClientFrame {
        .post(
            ClientFrame.Post(
                requestID: requestID, flags: [.ackWanted, .retain], name: name, payload: ByteBuffer(string: text),
                origin: Self.origin))
    }

    @Test("a marking subscriber gets a retained post as RETAINED(0) and a plain post as NOTIFICATION; a plain subscriber NOTIFICATIONs")
    func markingAndPlainSubscribers() throws {
        let daemon = EmbeddedBroker()
        let marker = try daemon.connect("marker")
        try marker.hello()
        try marker.subscribeMarking("org.example.>", id: 1)
        let plain = try daemon.connect("plain")
        try plain.hello()
        try plain.subscribe("org.example.>", id: 1)
        let poster = try daemon.connect("poster")
        try poster.hello()

        try poster.send(Self.post(1, "org.example.level", "kept", retain: true))
        guard case .posted(1, let retainedSequence, 2) = try poster.received().first else {
            Issue.record("expected POSTED(1) delivered to 2")
            return
        }
        try poster.send(Self.post(2, "org.example.level", "passing"))
        guard case .posted(2, let plainSequence, 2) = try poster.received().first else {
            Issue.record("expected POSTED(2) delivered to 2")
            return
        }

        let toMarker = try marker.received()
        #expect(toMarker.map(\.retainedRequestID) == [0, nil], "once each, the retained one marked: \(toMarker.map(\.summary))")
        #expect(toMarker.compactMap(\.anyNotification?.payloadText) == ["kept", "passing"])
        #expect(toMarker.compactMap(\.anyNotification?.sequence) == [retainedSequence, plainSequence])
        #expect(toMarker.first?.anyNotification?.name == "org.example.level")
        #expect(toMarker.first?.anyNotification?.sender == toMarker.last?.anyNotification?.sender, "the poster's credentials")
        let toPlain = try plain.received()
        #expect(toPlain.compactMap(\.notification?.payloadText) == ["kept", "passing"], "\(toPlain.map(\.summary))")
        #expect(toPlain.count == 2)
    }

    @Test("one frame per connection however many subscriptions match: a marking one wins over a stronger plain one")
    func mixedSubscriptionsOnOneConnection() throws {
        let daemon = EmbeddedBroker()
        let client = try daemon.connect("client")
        try client.hello()
        try client.subscribe("org.a", id: 1, policy: .disconnect)
        try client.subscribeMarking("org.*", id: 2)
        try client.subscribe("org.b", id: 3, policy: .queue(limit: 5))
        try client.subscribe("other.>", id: 4)
        let poster = try daemon.connect("poster")
        try poster.hello()

        try poster.send(
            Self.unacknowledged(1, "org.a", "1", retain: true), Self.unacknowledged(2, "org.b", "2", retain: true),
            Self.unacknowledged(3, "other.x", "3", retain: true))
        let frames = try client.received()
        #expect(frames.map(\.retainedRequestID) == [0, 0, nil], "\(frames.map(\.summary))")
        #expect(frames.compactMap(\.anyNotification?.payloadText) == ["1", "2", "3"], "once each")
        #expect(frames.last?.notification?.name == "other.x", "no marking subscription matches other.x")

        // Two subscriptions to one name, marking and not: the mark lasts as long as the marking one.
        try client.subscribeMarking("other.x", id: 5)
        try client.subscribe("other.x", id: 6)
        try poster.send(Self.unacknowledged(4, "other.x", "4", retain: true))
        #expect(try client.received().map(\.retainedRequestID) == [0])
        try client.send(.unsubscribe(requestID: 7, subscriptionID: 5))
        #expect(try client.received().map(\.summary) == ["OK(7)"])
        try poster.send(Self.unacknowledged(5, "other.x", "5", retain: true))
        let after = try client.received()
        #expect(after.map(\.summary).count == 1 && after.first?.notification?.payloadText == "5", "\(after.map(\.summary))")
    }

    @Test("in sequence order with the neighbouring posts of the same burst, runs of plain posts included")
    func orderWithNeighbours() throws {
        let daemon = EmbeddedBroker()
        let marker = try daemon.connect("marker")
        try marker.hello()
        try marker.subscribeMarking("org.x", id: 1)
        let poster = try daemon.connect("poster")
        try poster.hello()

        try poster.send(
            Self.unacknowledged(1, "org.x", "a"), Self.unacknowledged(2, "org.x", "b"),
            Self.unacknowledged(3, "org.x", "r", retain: true), Self.unacknowledged(4, "org.x", "c"),
            Self.unacknowledged(5, "org.x", "d"))
        let frames = try marker.received()
        #expect(frames.compactMap(\.anyNotification?.payloadText) == ["a", "b", "r", "c", "d"], "\(frames.map(\.summary))")
        #expect(frames.map(\.retainedRequestID) == [nil, nil, 0, nil, nil])
        let sequences = frames.compactMap(\.anyNotification?.sequence)
        #expect(sequences == sequences.sorted() && Set(sequences).count == 5, "increasing: \(sequences)")
    }

    @Test("a relayed retained post keeps its origin: in RETAINED(0) and in send-retained RETAINED, for origin-aware connections only")
    func originOfRetainedPosts() throws {
        let daemon = EmbeddedBroker()
        let awareMarker = try daemon.connect("aware-marker")
        try awareMarker.helloAskingForOrigins()
        try awareMarker.subscribeMarking("org.>", id: 1)
        let plainMarker = try daemon.connect("plain-marker")
        try plainMarker.hello()
        try plainMarker.subscribeMarking("org.>", id: 1)
        let relay = try daemon.connect("relay")
        try relay.hello()

        try relay.send(Self.relayed(1, "org.config", "v2"))
        #expect(try relay.received().first?.summary.hasPrefix("POSTED(") == true)
        let aware = try awareMarker.received()
        let plain = try plainMarker.received()
        #expect(aware.map(\.retainedRequestID) == [0] && plain.map(\.retainedRequestID) == [0])
        #expect(aware.first?.anyNotification?.origin == Self.origin)
        #expect(plain.first?.anyNotification?.origin == nil, "a client that did not ask never sees the field")

        // The store kept it: a later SUBSCRIBE with send-retained gets it, with the origin only if it asked.
        #expect(daemon.broker.store.retained[ExactName("org.config")]?.origin == Self.origin)
        let lateAware = try daemon.connect("late-aware")
        try lateAware.helloAskingForOrigins()
        let latePlain = try daemon.connect("late-plain")
        try latePlain.hello()
        for late in [lateAware, latePlain] {
            try late.send(.testSubscribe(requestID: 9, subscriptionID: 1, name: "org.config", flags: .sendRetained))
        }
        let currentAware = try lateAware.received()
        let currentPlain = try latePlain.received()
        #expect(currentAware.map(\.summary).last == "OK(9)" && currentPlain.map(\.summary).last == "OK(9)")
        #expect(currentAware.first?.retainedRequestID == 9 && currentAware.first?.anyNotification?.origin == Self.origin)
        #expect(currentPlain.first?.retainedRequestID == 9 && currentPlain.first?.anyNotification?.origin == nil)
        #expect(currentAware.first?.anyNotification?.payloadText == "v2")

        // A local retained post replaces it, origin and all.
        try relay.send(Self.post(2, "org.config", "v3", retain: true))
        _ = try relay.received()
        #expect(try awareMarker.received().first?.anyNotification?.origin == nil)
        #expect(daemon.broker.store.retained[ExactName("org.config")]?.origin == nil)
    }

    @Test("never held: a suspended marking connection gets RETAINED(0) at once, ahead of the notifications it holds")
    func notHeldWhileSuspended() throws {
        let daemon = EmbeddedBroker()
        let marker = try daemon.connect("marker")
        try marker.hello()
        try marker.subscribeMarking("org.>", id: 1)
        try marker.send(.suspend(requestID: 2))
        #expect(try marker.received().map(\.summary) == ["OK(2)"])
        let poster = try daemon.connect("poster")
        try poster.hello()

        try poster.send(Self.post(3, "org.a", "held"), Self.post(4, "org.a", "retained", retain: true))
        #expect(try poster.received().count == 2)
        let whileSuspended = try marker.received()
        #expect(whileSuspended.map(\.retainedRequestID) == [0], "\(whileSuspended.map(\.summary))")
        #expect(whileSuspended.first?.anyNotification?.payloadText == "retained")

        try marker.send(.resume(requestID: 5))
        let afterResume = try marker.received()
        #expect(afterResume.first?.summary == "OK(5)")
        #expect(afterResume.compactMap(\.notification?.payloadText) == ["held"], "posted before it, released after it")
    }

    @Test("a stalled marking connection is closed as a slow consumer; a stalled plain one coalesces, a reading one gets all")
    func stalledMarkerIsDisconnected() throws {
        let daemon = EmbeddedBroker { $0.outboundByteLimit = 4_096 }
        let stalled = try daemon.connectStalled(
            "stalled", sending: [.testSubscribe(requestID: 1, subscriptionID: 1, name: "org.>", flags: .marksRetained)])
        let stalledPlain = try daemon.connectStalled(
            "stalled-plain", sending: [.testSubscribe(requestID: 1, subscriptionID: 1, name: "org.>")])
        let healthy = try daemon.connect("healthy")
        try healthy.hello()
        try healthy.subscribeMarking("org.example.level", id: 1)
        let poster = try daemon.connect("poster")
        try poster.hello()

        // About 60 bytes a frame: far more than 4 KiB in all.
        try poster.send((1...200).map { Self.unacknowledged(UInt32($0), "org.example.level", "\($0)", retain: true) })
        #expect(try poster.received().isEmpty, "the poster is neither slowed nor refused")
        let toHealthy = try healthy.received()
        #expect(toHealthy.compactMap(\.anyNotification?.payloadText) == (1...200).map { "\($0)" }, "nothing lost: \(toHealthy.count)")
        #expect(toHealthy.allSatisfy { $0.retainedRequestID == 0 })

        try stalled.expectClosedAsSlowConsumer(over: "org.example.level", posted: 200) {
            $0.anyNotification.flatMap { UInt64($0.payloadText) }
        }
        daemon.run()
        #expect(!stalled.isActive)
        #expect(daemon.broker.statistics.slowConsumerDisconnects == 1, "only the marking one")

        stalledPlain.readWrites()
        let plainFrames = try stalledPlain.received()
        #expect(stalledPlain.isActive, "coalescing, as any plain subscription does")
        #expect(plainFrames.last?.anyNotification?.payloadText == "200", "\(plainFrames.suffix(2).map(\.summary))")
        #expect(!plainFrames.contains { $0.retainedRequestID != nil }, "never marked without a marking subscription")
    }

    @Test("flags: marks-retained with states, or a reserved bit, is refused with unsupported-flags")
    func refusedFlags() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .bob)
            let withStates = try await client.expectError("SUBSCRIBE marks-retained + states") {
                .testSubscribe(requestID: $0, subscriptionID: 1, name: "org.a", flags: [.states, .marksRetained])
            }
            #expect(withStates.code == .unsupportedFlags && !withStates.closesConnection)
            for bit in [UInt8(0x08), 0x10, 0x80] {
                let reserved = try await client.expectError("SUBSCRIBE flag \(bit)") {
                    .testSubscribe(
                        requestID: $0, subscriptionID: 1, name: "org.a",
                        flags: SubscribeFlags(rawValue: bit | SubscribeFlags.marksRetained.rawValue))
                }
                #expect(reserved.code == .unsupportedFlags)
            }
            try await client.expectOK("SUBSCRIBE marks-retained + send-retained") {
                .testSubscribe(requestID: $0, subscriptionID: 1, name: "org.a", flags: [.marksRetained, .sendRetained])
            }
            #expect(try await server.status().subscriptions == 1, "counted like any subscription")
        }
    }
}

extension EmbeddedPeer {
    /// Subscribes with the marks-retained flag and expects exactly `OK` back.
    func subscribeMarking(_ pattern: String, id: UInt32) throws {
        try send(.testSubscribe(requestID: id, subscriptionID: id, name: pattern, flags: .marksRetained))
        let frames = try received()
        guard frames.map(\.summary) == ["OK(\(id))"] else {
            throw TestFailure("peer '\(name)': expected OK(\(id)) for SUBSCRIBE marks-retained '\(pattern)', got \(frames.map(\.summary))")
        }
    }

    /// Sends `HELLO` with the origins flag and expects exactly `WELCOME` back.
    func helloAskingForOrigins() throws {
        try send(.hello(ClientFrame.Hello(flags: HelloFlags.origins, clientName: name)))
        let frames = try received()
        guard frames.count == 1, case .welcome = frames[0] else {
            throw TestFailure("expected WELCOME, got \(frames.map(\.summary))")
        }
    }
}

extension ServerFrame {
    /// The request id of a `RETAINED`, if this is one.
    var retainedRequestID: UInt32? {
        if case .retained(let requestID, _) = self { return requestID }
        return nil
    }
}
