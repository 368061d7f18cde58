import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// What a client sees of the broker and its peers, step by step on an `EmbeddedEventLoop`
/// (``EmbeddedBroker``): no sockets, no threads, no waiting.
@Suite("Peers on an embedded event loop")
struct EmbeddedPeerTests {
    @Test("HELLO is answered with WELCOME carrying the protocol version, the daemon's pid and instance")
    func helloWelcome() throws {
        let daemon = EmbeddedBroker()
        let peer = try daemon.connect("greeter")
        let welcome = try peer.hello()
        #expect(welcome.version == ProtocolConstants.version)
        #expect(welcome.daemonPID == 1)
        #expect(welcome.instanceID == daemon.broker.instanceID)
        try peer.send(.ping(requestID: 7))
        #expect(try peer.received().map(\.summary) == [ServerFrame.pong(requestID: 7).summary])
    }

    @Test("a client that pipelines requests, stops reading and closes its sending side gets every answer, then EOF")
    func halfCloseWhileBackPressured() throws {
        let daemon = EmbeddedBroker { $0.outboundByteLimit = 4_096 }
        // 2,000 PONGs are 18,000 bytes: reading stops with PINGs still to serve, and then the input ends.
        let peer = try daemon.connectStalled("pipeliner", sending: (1...2_000).map { .ping(requestID: $0) })
        peer.channel.pipeline.syncOperations.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        daemon.run()
        #expect(peer.isActive, "still answering")

        peer.readWrites()
        let frames = try peer.received()
        daemon.run()
        #expect(frames.first?.summary.hasPrefix("WELCOME") == true)
        let pongs = frames.dropFirst().map(\.summary)
        let everyPongInOrder = pongs == (1...2_000).map { ServerFrame.pong(requestID: $0).summary }
        #expect(everyPongInOrder, "\(pongs.count) frames after WELCOME, ending \(pongs.suffix(2))")
        #expect(!peer.isActive, "closed once everything was written")
    }

    @Test("a request before HELLO gets one fatal ERROR, then the connection closes and nothing else is served")
    func frameBeforeHello() throws {
        let daemon = EmbeddedBroker()
        let peer = try daemon.connect("impatient")
        try peer.send(.ping(requestID: 1), .ping(requestID: 2))
        daemon.run()
        let frames = try peer.received()
        #expect(frames.count == 1, "\(frames.map(\.summary))")
        let error = try #require(frames.first?.errorFrame, "\(frames.map(\.summary))")
        #expect(error.closesConnection)
        #expect(error.requestID == ProtocolConstants.noRequest)
        #expect(!peer.isActive, "the daemon closed the connection")
    }

    @Test("posts from one peer reach a subscriber's bytes in posting order, with increasing sequence numbers")
    func postReachesSubscriberInOrder() throws {
        let daemon = EmbeddedBroker()
        let subscriber = try daemon.connect("subscriber")
        try subscriber.hello()
        try subscriber.subscribe("org.example.>", id: 1, policy: .queue(limit: 100))
        let poster = try daemon.connect("poster")
        try poster.hello()

        let names = (0..<20).map { "org.example.n\($0 % 3)" }
        try poster.send(
            names.enumerated().map { .post(ClientFrame.Post(requestID: 0, name: $1, payload: ByteBuffer(string: "\($0)"))) })
        #expect(try poster.received().isEmpty, "unacknowledged posts get no reply")
        let frames = try subscriber.received()
        let notifications = frames.compactMap(\.notification)
        #expect(notifications.count == frames.count, "only notifications: \(frames.map(\.summary))")
        #expect(notifications.map(\.name) == names)
        #expect(notifications.map(\.payloadText) == names.indices.map { "\($0)" })
        #expect(zip(notifications, notifications.dropFirst()).allSatisfy { $0.sequence < $1.sequence })
    }

    @Test("a reply to a peer's own request and a notification posted after it reach the peer in that order")
    func replyThenNotificationInOrder() throws {
        let daemon = EmbeddedBroker()
        let subscriber = try daemon.connect("subscriber")
        try subscriber.hello()
        try subscriber.subscribe("org.example.order", id: 1)
        let poster = try daemon.connect("poster")
        try poster.hello()
        // The PONG is written at the next tick (it answers the subscriber's own read); the post, read from
        // another connection before that tick, must not overtake it.
        try subscriber.send(.ping(requestID: 7))
        try poster.send(.post(ClientFrame.Post(requestID: 0, name: "org.example.order", payload: ByteBuffer(string: "after"))))
        let frames = try subscriber.received()
        #expect(frames.count == 2, "\(frames.map(\.summary))")
        #expect(frames.first?.summary == ServerFrame.pong(requestID: 7).summary, "\(frames.map(\.summary))")
        #expect(frames.last?.notification?.payloadText == "after", "\(frames.map(\.summary))")
    }

    @Test("two matching subscriptions of different policies: notifications held for the peer follow the stronger (queue, not coalesce)")
    func heldUnderTheStrongerPolicy() throws {
        let daemon = EmbeddedBroker { $0.outboundByteLimit = 2_048 }
        let reader = try daemon.connectStalled(
            "slow-reader",
            sending: [
                .testSubscribe(requestID: 1, subscriptionID: 1, name: "org.mix.>", policy: .coalesce),
                .testSubscribe(requestID: 2, subscriptionID: 2, name: "org.mix.a", policy: .queue(limit: 100)),
            ])
        let poster = try daemon.connect("poster")
        try poster.hello()
        // About 3,000 bytes of notifications, more than the 2,048 the reader may have pending: the rest is held.
        let count = 30
        try poster.send(
            (0..<count).map {
                .post(ClientFrame.Post(requestID: 0, name: "org.mix.a", payload: ByteBuffer(repeating: UInt8($0), count: 64)))
            })
        #expect(reader.unreadBytes <= 2_048 + 128, "the daemon wrote only up to its bound: \(reader.unreadBytes) bytes")
        #expect(daemon.broker.status().heldBytes > 0, "notifications are held for the reader")

        reader.readWrites()
        daemon.run()
        let frames = try reader.received()
        let notifications = frames.filter { $0.anyNotification?.name == "org.mix.a" }
        #expect(
            notifications.allSatisfy { $0.notification != nil },
            "held under queue: none merged, none dropped: \(notifications.map(\.summary))")
        #expect(notifications.count == count, "\(frames.map(\.summary))")
        #expect(notifications.compactMap(\.notification).map { $0.payload.getInteger(at: $0.payload.readerIndex, as: UInt8.self) }
            == (0..<count).map { UInt8($0) })
    }

    @Test("a client that sends requests without reading the replies stops being read until it catches up")
    func backPressureStopsReading() throws {
        let daemon = EmbeddedBroker { $0.outboundByteLimit = 1_024 }
        let greedy = try daemon.connectStalled("greedy")
        let pings = 2_000  // 9 bytes per PONG: 18,000 bytes of replies, far over the bound
        try greedy.send((1...pings).map { .ping(requestID: UInt32($0)) })
        daemon.run()
        #expect(!greedy.isReading, "the daemon stopped reading the client")
        #expect(greedy.unreadBytes < 4 * 1_024, "the replies stayed near the bound: \(greedy.unreadBytes) bytes")

        greedy.readWrites()
        daemon.run()
        #expect(greedy.isReading, "reading resumed once the client read its replies")
        let pongs = try greedy.received().compactMap { frame -> UInt32? in
            if case .pong(let id) = frame { id } else { nil }
        }
        #expect(pongs.elementsEqual(1...UInt32(pings)), "every PING answered in order once it read: \(pongs.count) PONGs")
    }

    @Test("a disconnect subscriber that stops reading for an hour still gets ERROR slow-consumer, then EOF, when it reads")
    func stoppedSlowConsumerLearnsWhy() throws {
        let daemon = EmbeddedBroker { $0.outboundByteLimit = 4_096 }
        let stalled = try daemon.connectStalled(
            "stopped", sending: [.testSubscribe(requestID: 1, subscriptionID: 1, name: "org.example.tick", policy: .disconnect)])
        let poster = try daemon.connect("poster")
        try poster.hello()
        try poster.send(
            (1...200).map { .post(ClientFrame.Post(requestID: 0, name: "org.example.tick", payload: ByteBuffer(integer: UInt64($0)))) })
        daemon.run()
        #expect(daemon.broker.statistics.slowConsumerDisconnects == 1)

        // The client is stopped (SIGSTOP) far longer than any timer: the daemon keeps the reason for it.
        daemon.loop.advanceTime(by: .hours(1))
        #expect(stalled.isActive, "the connection waits for the client to read the ERROR")
        try stalled.expectClosedAsSlowConsumer(over: "org.example.tick", posted: 200) {
            $0.notification.flatMap { $0.payload.getInteger(at: $0.payload.readerIndex, as: UInt64.self) }
        }
        daemon.run()
        #expect(!stalled.isActive, "closed once the ERROR was written")
    }

    @Test("a poster's own flush while its post is served from the accumulator's bytes waits for the next tick: a read it causes cannot reach those bytes")
    func ownFlushWhileServingInPlace() throws {
        // A 16 KiB bound flushes a peer once 4 KiB are queued for it.
        let daemon = EmbeddedBroker { $0.outboundByteLimit = 16 * 1_024 }
        // What NIO does when a write fails: it reads the channel at once, from inside the write.
        let readsOnFlush = ReadsOnFlush()
        let poster = try daemon.connect("echoing-poster", outbound: readsOnFlush)
        try poster.hello()
        try poster.subscribe("own.echo", id: 1, policy: .queue(limit: 1_000))
        let other = try daemon.connect("other")
        try other.hello()
        try other.subscribe("other.name", id: 1, policy: .queue(limit: 1_000))
        readsOnFlush.arm(with: ClientFrame.ping(requestID: 99))
        // Alternating names: each post to own.echo goes to the poster alone, encoded straight into its queue, and
        // the fourth passes 4 KiB: a flush of the poster while its own post is being served. Without the deferral
        // the read lands in the accumulator under the lent bytes: the debug build's exclusivity check stops the
        // test process (release builds do not check).
        let payload = ByteBuffer(repeating: 0x61, count: 1_000)
        try poster.send(
            (1...12).flatMap { index -> [ClientFrame] in
                [
                    .post(ClientFrame.Post(requestID: 0, name: "own.echo", payload: payload)),
                    .post(ClientFrame.Post(requestID: 0, name: "other.name", payload: ByteBuffer(integer: UInt32(index)))),
                ]
            })
        daemon.run()
        #expect(readsOnFlush.fired, "the poster was flushed (the bytes read from inside the flush were delivered)")
        let frames = try poster.received()
        #expect(frames.filter { $0.notification?.name == "own.echo" }.count == 12)
        #expect(frames.last == .pong(requestID: 99), "the PING read from inside the flush was served after the posts: \(frames.map(\.summary))")
        #expect(try other.received().compactMap(\.notification).count == 12)
    }
}

extension EmbeddedPeerTests {
    @Test("a client that posts a long burst to a name it observes, and reads everything, gets its batches during the burst, not a slow-consumer ERROR")
    func ownBurstIsFlushedDuringTheBurst() throws {
        // The smallest bound the daemon allows: 64 KiB, flushed once 16 KiB are queued.
        let daemon = EmbeddedBroker { $0.outboundByteLimit = 65_536 }
        let client = try daemon.connect("self-observer")
        try client.hello()
        try client.subscribe("own.burst", id: 1, policy: .disconnect)
        let payload = ByteBuffer(repeating: 0x62, count: 1_000)
        try client.send((1...256).map { _ in .post(ClientFrame.Post(requestID: 0, name: "own.burst", payload: payload)) })
        daemon.run()
        #expect(daemon.broker.statistics.slowConsumerDisconnects == 0)
        let frames = try client.received()
        #expect(frames.compactMap(\.notification).count == 256, "\(frames.suffix(2).map(\.summary))")
        #expect(client.channel.isActive)
        // Each flush of its own queue ends a run of frames served in place; the posts after it still continue the
        // same run of posts (served from their bytes, not decoded into a new run each time).
        let entry = try #require(daemon.broker.snapshot().clients.first { $0.clientName == "self-observer" })
        #expect(entry.mostFramesInOneTurn <= 2, "\(entry.mostFramesInOneTurn) frames decoded in one turn")
    }
}

/// Reads bytes into the channel from inside the first flush after ``arm(with:)``, as NIO does when a write fails.
private final class ReadsOnFlush: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer

    private var pending: ByteBuffer?
    private(set) var fired = false

    func arm(with frame: ClientFrame) {
        var bytes = ByteBuffer()
        frame.encode(into: &bytes)
        pending = bytes
    }

    func flush(context: ChannelHandlerContext) {
        context.flush()
        if let bytes = pending {
            pending = nil
            fired = true
            context.fireChannelRead(NIOAny(bytes))
            context.fireChannelReadComplete()
        }
    }
}
