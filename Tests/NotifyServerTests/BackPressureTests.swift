import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

@Suite("Back-pressure", .timeLimit(.minutes(TestScale.minutes(3))))
struct BackPressureTests {
    /// The parameters shared by the stalled-subscriber tests: 20,000 notifications of 1 KiB on one name (about
    /// 21 MB) against a bound of 256 KiB per connection.
    private static let limit = 256 * 1_024
    private static let total: UInt32 = 20_000
    private static let name = "org.example.flood"

    /// A server whose `stalled` client subscribed to ``name`` under `policy` (subscription `stalledSubscription`)
    /// and stopped reading, whose `reader` client subscribed with the default policy and reads, and whose `poster`
    /// has posted ``total`` notifications: the state every stalled-subscriber test starts from.
    ///
    /// The poster sends in batches and the reader takes each batch before the next is sent, so the reader's own
    /// queue stays far below the bound while the stalled one's fills. Checks that the reader received every
    /// notification in order, and that the poster was never blocked.
    private static func flood(
        _ server: TestServer, stalledPolicy policy: DeliveryPolicy, stalledSubscription: UInt32
    ) async throws -> (stalled: TestClient, reader: TestClient, poster: TestClient) {
        let batch: UInt32 = 100
        let payloadSize = 1_024
        let stalled = try await server.connect("stalled", receiveBufferSize: 4_096)
        try await stalled.subscribe(name, subscriptionID: stalledSubscription, requestID: 1, policy: policy)
        try await stalled.setReading(false)
        let reader = try await server.connect("reader")
        try await reader.subscribe(name, subscriptionID: 1, requestID: 1)
        let poster = try await server.connect("poster")

        var lastSequence: UInt64 = 0
        var next: UInt32 = 0
        while next < total {
            var buffer = poster.channel.allocator.buffer(capacity: Int(batch) * (payloadSize + 40))
            for index in next..<(next + batch) {
                ClientFrame.post(
                    ClientFrame.Post(requestID: index + 1, name: name, payload: counterPayload(index, size: payloadSize))
                ).encode(into: &buffer)
            }
            try await poster.sendBuffer(buffer)
            for index in next..<(next + batch) {
                let notification = try await reader.nextNotification()
                guard counter(of: notification.payload) == index, notification.sequence > lastSequence else {
                    throw TestFailure(
                        "reader: expected counter \(index) after sequence \(lastSequence), got counter \(String(describing: counter(of: notification.payload))) with sequence \(notification.sequence)")
                }
                lastSequence = notification.sequence
            }
            next += batch
        }
        // The poster was never blocked: its PONG comes, with nothing before it.
        try await poster.expectQuiet()
        try await reader.expectQuiet()
        return (stalled, reader, poster)
    }

    /// The daemon's counters (merged, dropped, held bytes, slow-consumer disconnects), which the snapshot lacks.
    private static func status(_ server: TestServer) async throws -> DaemonStatus {
        try #require(await server.server.status(), "the server is running, so it has a status")
    }

    @Test("A stalled subscriber (coalesce, the default) costs bounded memory, never blocks the poster, and gets the latest notification merged after an in-order prefix")
    func stalledSubscriberCoalesce() async throws {
        let (limit, total) = (Self.limit, Self.total)
        try await withServer({ $0.outboundByteLimit = limit }) { server in
            let (stalled, _, _) = try await Self.flood(server, stalledPolicy: .coalesce, stalledSubscription: 7)

            let snapshot = try await server.snapshot()
            let stalledEntry = try #require(snapshot.clients.first { $0.clientName == "stalled" })
            let readerEntry = try #require(snapshot.clients.first { $0.clientName == "reader" })
            #expect(stalledEntry.pendingBytes <= limit)
            // Coalescing loses nothing that is not reported: notifications are merged, none dropped.
            #expect(stalledEntry.droppedNotifications == 0)
            #expect(readerEntry.droppedNotifications == 0)
            #expect(snapshot.dropped == 0)
            #expect(snapshot.posts == UInt64(total))
            // Held notifications count as delivered (as in POSTED's delivered_count).
            #expect(snapshot.deliveries == 2 * UInt64(total))
            #expect(snapshot.outboundByteLimit == limit)
            let status = try await Self.status(server)
            #expect(status.merged > 0)
            #expect(status.heldBytes > 0, "the latest notification is held for the stalled subscriber")
            #expect(status.heldBytes <= limit)

            // The stalled subscriber reads now: a prefix in order, then the latest notification, as
            // NOTIFICATION_MERGED counting every notification it stands for; together they account for every post.
            try await stalled.setReading(true)
            var received: UInt64 = 0
            var lastSequence: UInt64 = 0
            var mergedCount: UInt64?
            readLoop: while received < UInt64(total) {
                let frame = try await stalled.next()
                switch frame {
                case .notification(let notification):
                    let value = counter(of: notification.payload)
                    guard value == UInt32(received), notification.sequence > lastSequence else {
                        Issue.record(
                            "stalled: expected counter \(received), got \(String(describing: value)) with sequence \(notification.sequence) after \(lastSequence)")
                        return
                    }
                    lastSequence = notification.sequence
                    received += 1
                case .notificationMerged(let merged, let notification):
                    #expect(merged == UInt64(total) - received - 1, "merged into the latest: every notification not received")
                    #expect(counter(of: notification.payload) == total - 1, "the latest notification is kept")
                    #expect(notification.sequence > lastSequence)
                    #expect(notification.sequence == UInt64(total))
                    #expect(notification.name == Self.name)
                    mergedCount = merged
                    break readLoop
                default:
                    Issue.record("stalled: unexpected \(frame.summary)")
                    return
                }
            }
            #expect(received > 0, "what was queued before the stall arrives first")
            let merged = try #require(mergedCount, "the stalled subscriber received a NOTIFICATION_MERGED")
            #expect(received + merged + 1 == UInt64(total))
            #expect(merged == status.merged)
            try await stalled.expectQuiet()

            let after = try await server.snapshot()
            #expect(after.clients.first { $0.clientName == "stalled" }?.pendingBytes == 0)
            #expect(try await Self.status(server).heldBytes == 0)
        }
    }

    @Test("A stalled subscriber with the queue policy keeps the last N and learns of its losses by OVERFLOW, where the gap is")
    func stalledSubscriberQueue() async throws {
        let (limit, total) = (Self.limit, Self.total)
        let queueLimit: UInt32 = 50
        let subscription: UInt32 = 7
        try await withServer({ $0.outboundByteLimit = limit }) { server in
            let (stalled, _, _) = try await Self.flood(
                server, stalledPolicy: .queue(limit: queueLimit), stalledSubscription: subscription)

            let snapshot = try await server.snapshot()
            let stalledEntry = try #require(snapshot.clients.first { $0.clientName == "stalled" })
            let readerEntry = try #require(snapshot.clients.first { $0.clientName == "reader" })
            #expect(stalledEntry.pendingBytes <= limit)
            #expect(stalledEntry.droppedNotifications > 0)
            #expect(readerEntry.droppedNotifications == 0)
            #expect(snapshot.dropped == stalledEntry.droppedNotifications)
            #expect(snapshot.posts == UInt64(total))
            // Held notifications count as delivered (as in POSTED's delivered_count), also those the queue dropped later.
            #expect(snapshot.deliveries == 2 * UInt64(total))
            #expect(snapshot.outboundByteLimit == limit)
            let status = try await Self.status(server)
            #expect(status.merged == 0)
            #expect(status.heldBytes > 0)
            #expect(status.heldBytes <= limit)

            // The stalled subscriber reads now: notifications in order, each gap announced by an OVERFLOW naming
            // the subscription that stands exactly where the gap is, and together they account for every post.
            try await stalled.setReading(true)
            var received: UInt64 = 0
            var dropped: UInt64 = 0
            var overflowNotices = 0
            var receivedAfterLastOverflow: UInt32 = 0
            var expectedCounter: UInt32 = 0
            var lastSequence: UInt64 = 0
            while received + dropped < UInt64(total) {
                let frame = try await stalled.next()
                switch frame {
                case .notification(let notification):
                    let value = counter(of: notification.payload)
                    guard value == expectedCounter, notification.sequence > lastSequence else {
                        Issue.record(
                            "stalled: expected counter \(expectedCounter) (received \(received), dropped \(dropped) so far), got \(String(describing: value)) with sequence \(notification.sequence) after \(lastSequence)")
                        return
                    }
                    lastSequence = notification.sequence
                    expectedCounter += 1
                    received += 1
                    receivedAfterLastOverflow += 1
                case .overflow(let subscriptionID, let droppedCount):
                    #expect(subscriptionID == subscription)
                    #expect(droppedCount >= 1)
                    overflowNotices += 1
                    dropped += droppedCount
                    expectedCounter += UInt32(clamping: droppedCount)
                    receivedAfterLastOverflow = 0
                default:
                    Issue.record("stalled: unexpected \(frame.summary)")
                    return
                }
            }
            #expect(received + dropped == UInt64(total))
            #expect(received > 0)
            #expect(overflowNotices >= 1)
            #expect(receivedAfterLastOverflow == queueLimit, "the queue keeps the last \(queueLimit) notifications")
            #expect(dropped == stalledEntry.droppedNotifications)
            try await stalled.expectQuiet()

            let after = try await server.snapshot()
            #expect(after.clients.first { $0.clientName == "stalled" }?.pendingBytes == 0)
            #expect(try await Self.status(server).heldBytes == 0)
        }
    }

    @Test("A stalled subscriber with the disconnect policy gets the bytes in flight, then ERROR slow-consumer, then EOF")
    func stalledSubscriberDisconnect() async throws {
        let (limit, total) = (Self.limit, Self.total)
        try await withServer({ $0.outboundByteLimit = limit }) { server in
            let (stalled, _, _) = try await Self.flood(server, stalledPolicy: .disconnect, stalledSubscription: 7)

            let snapshot = try await server.snapshot()
            let readerEntry = try #require(snapshot.clients.first { $0.clientName == "reader" })
            // The stalled connection may still be listed while its last bytes wait to be read.
            if let stalledEntry = snapshot.clients.first(where: { $0.clientName == "stalled" }) {
                #expect(stalledEntry.pendingBytes <= limit)
                #expect(stalledEntry.droppedNotifications == 0)
            }
            #expect(readerEntry.droppedNotifications == 0)
            #expect(snapshot.dropped == 0)
            #expect(snapshot.posts == UInt64(total))
            #expect(snapshot.deliveries >= UInt64(total))
            #expect(snapshot.deliveries < 2 * UInt64(total), "nothing is delivered to a disconnected subscriber")
            #expect(snapshot.outboundByteLimit == limit)
            let status = try await Self.status(server)
            #expect(status.slowConsumerDisconnects == 1)
            #expect(status.merged == 0)
            #expect(status.heldBytes == 0, "nothing is held under the disconnect policy")

            // The stalled subscriber reads now: the notifications already on their way, in order, then the
            // ERROR that says why, then the end of the connection.
            try await stalled.setReading(true)
            var received: UInt32 = 0
            var lastSequence: UInt64 = 0
            readLoop: while true {
                let frame = try await stalled.next()
                switch frame {
                case .notification(let notification):
                    let value = counter(of: notification.payload)
                    guard value == received, notification.sequence > lastSequence else {
                        Issue.record(
                            "stalled: expected counter \(received), got \(String(describing: value)) with sequence \(notification.sequence) after \(lastSequence)")
                        return
                    }
                    lastSequence = notification.sequence
                    received += 1
                case .error(let error):
                    #expect(error.code == .slowConsumer, "\(error)")
                    #expect(error.closesConnection)
                    #expect(error.requestID == 0)
                    break readLoop
                default:
                    Issue.record("stalled: unexpected \(frame.summary)")
                    return
                }
            }
            #expect(received > 0, "what was queued before the stall arrives first")
            #expect(received < total)
            #expect(try await stalled.expectEnd() == .endOfFile)

            let after = try await server.waitForSnapshot("the slow consumer gone") {
                !$0.clients.contains { $0.clientName == "stalled" }
            }
            #expect(after.deliveries >= UInt64(total) + UInt64(received))
        }
    }

    @Test("A client that sends requests without reading the replies only delays itself")
    func requestFloodWithoutReading() async throws {
        try await withServer({ $0.outboundByteLimit = 16 * 1_024 }) { server in
            let flooder = try await server.connect("flooder")
            try await flooder.setReading(false)
            // 40,000 PONGs are 360,000 bytes of replies, far above the bound (and more than the kernel buffers
            // hold): the daemon must stop reading the flooder's requests for a while, and resume once it reads.
            let pings: UInt32 = 40_000
            var buffer = flooder.channel.allocator.buffer(capacity: Int(pings) * 9)
            for id in 1...pings { ClientFrame.ping(requestID: id).encode(into: &buffer) }
            let written = flooder.startSending(buffer)

            // Other connections are served meanwhile.
            let other = try await server.connect("other")
            try await other.subscribe("org.example.meanwhile", subscriptionID: 1, requestID: 1)
            #expect(try await other.postAcked("org.example.meanwhile.not", requestID: 2) == (1, 0))

            try await flooder.setReading(true)
            for expected in 1...pings {
                let frame = try await flooder.next()
                guard case .pong(expected) = frame else {
                    Issue.record("flooder: expected PONG(\(expected)), got \(frame.summary)")
                    return
                }
            }
            try await written.get()
            try await flooder.expectQuiet()
        }
    }
}
