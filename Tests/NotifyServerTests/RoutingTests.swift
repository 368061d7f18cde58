import Dispatch
import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// The credentials the daemon must stamp on posts from this (in-process) test.
let ownCredentials = SenderCredentials(pid: UInt32(getpid()), uid: getuid(), gid: getgid())

@Suite("Routing and fan-out", .timeLimit(.minutes(TestScale.minutes(2))))
struct RoutingTests {
    @Test("A post reaches every subscriber of its name with identical bytes, and nobody else")
    func fanOutToSubscribers() async throws {
        try await withServer { server in
            let name = "org.example.fanout"
            var subscribers: [TestClient] = []
            for index in 1...3 {
                let subscriber = try await server.connect("subscriber-\(index)")
                try await subscriber.subscribe(name, subscriptionID: UInt32(10 + index), requestID: 1)
                subscribers.append(subscriber)
            }
            let bystander = try await server.connect("other-name")
            try await bystander.subscribe("org.example.other", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            let payload = Array(#"{"level":17}"#.utf8)
            let (sequence, delivered) = try await poster.postAcked(name, payload: payload, requestID: 42)
            #expect(delivered == 3)
            #expect(sequence == 1, "the first accepted post after the daemon started has sequence 1")

            var expected = ByteBuffer()
            NotificationFrame.encode(
                sequence: sequence, sender: ownCredentials, name: name, payload: ByteBuffer(bytes: payload),
                into: &expected)
            var copies: [ByteBuffer] = []
            for subscriber in subscribers {
                let received = try await subscriber.nextReceived()
                let notification = try #require(received.frame.notification, "\(subscriber.name) got \(received.frame.summary)")
                #expect(notification.sequence == sequence)
                #expect(notification.sender == ownCredentials)
                #expect(notification.name == name)
                #expect(notification.payload == ByteBuffer(bytes: payload))
                copies.append(received.bytes)
            }
            #expect(copies[0] == copies[1])
            #expect(copies[1] == copies[2])
            #expect(copies[0] == expected, "the NOTIFICATION bytes are the documented encoding of the post")

            // Each subscriber got exactly one copy; the subscriber of another name got nothing.
            for subscriber in subscribers { try await subscriber.expectQuiet() }
            try await bystander.expectQuiet()
            try await poster.expectQuiet()
        }
    }

    @Test("Sequence numbers rise by 1 per accepted post, also without subscribers; rejected posts take none")
    func sequenceNumbers() async throws {
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("seq.watched", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            let first = try await poster.postAcked("seq.watched", requestID: 1)
            #expect(first == (1, 1))
            let second = try await poster.postAcked("seq.nobody", requestID: 2)
            #expect(second == (2, 0))

            // Rejected posts: no sequence number.
            try await poster.send(.post(ClientFrame.Post(requestID: 3, flags: .ackWanted, name: "bad name", payload: ByteBuffer())))
            #expect(try await poster.nextError().code == .invalidName)
            // Ack plus a reserved bit (0x02 is the retain flag).
            try await poster.send(.post(ClientFrame.Post(requestID: 4, flags: PostFlags(rawValue: 0x09), name: "seq.watched", payload: ByteBuffer())))
            #expect(try await poster.nextError().code == .unsupportedFlags)

            let third = try await poster.postAcked("seq.watched", requestID: 5)
            #expect(third == (3, 1))

            // Posts without the ack flag take numbers too (4, 5, 6).
            try await poster.send(
                .post(ClientFrame.Post(requestID: 6, name: "seq.nobody", payload: ByteBuffer())),
                .post(ClientFrame.Post(requestID: 7, name: "seq.watched", payload: ByteBuffer())),
                .post(ClientFrame.Post(requestID: 8, name: "seq.nobody", payload: ByteBuffer())))
            let fourth = try await poster.postAcked("seq.watched", requestID: 9)
            #expect(fourth == (7, 1))
            try await poster.expectQuiet()

            var sequences: [UInt64] = []
            for _ in 0..<4 { sequences.append(try await subscriber.nextNotification().sequence) }
            #expect(sequences == [1, 3, 5, 7])
            try await subscriber.expectQuiet()

            let snapshot = try await server.snapshot()
            #expect(snapshot.posts == 7)
            #expect(snapshot.deliveries == 4)
            #expect(snapshot.dropped == 0)
        }
    }

    @Test("Names are compared byte for byte, without Unicode normalisation")
    func namesAreComparedByteForByte() async throws {
        let composed = "org.example.caf\u{E9}"  // é as U+00E9
        let decomposed = "org.example.cafe\u{301}"  // e + U+0301: canonically equivalent, different bytes
        #expect(Array(composed.utf8) != Array(decomposed.utf8))
        try await withServer { server in
            let composedSubscriber = try await server.connect("composed")
            try await composedSubscriber.subscribe(composed, subscriptionID: 1, requestID: 1)
            let decomposedSubscriber = try await server.connect("decomposed")
            try await decomposedSubscriber.subscribe(decomposed, subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            #expect(try await server.snapshot().names == 2, "two different names are subscribed")

            #expect(try await poster.postAcked(composed, requestID: 1).deliveredCount == 1)
            let first = try await composedSubscriber.nextNotification()
            #expect(Array(first.name.utf8) == Array(composed.utf8))
            try await decomposedSubscriber.expectQuiet()

            #expect(try await poster.postAcked(decomposed, requestID: 2).deliveredCount == 1)
            let second = try await decomposedSubscriber.nextNotification()
            #expect(Array(second.name.utf8) == Array(decomposed.utf8))
            try await composedSubscriber.expectQuiet()
        }
    }

    @Test("A POST name that breaks the grammar is rejected even if canonically equivalent to a subscribed name")
    func invalidPostNameEquivalentToSubscribedName() async throws {
        let subscribed = "org.example.q\u{37E}"  // GREEK QUESTION MARK: a valid label character (>= U+00A0)
        let posted = "org.example.q;"  // its canonical decomposition, ';' (U+003B), which names may not contain
        #expect(NotificationName.isValid(subscribed))
        #expect(!NotificationName.isValid(posted))
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe(subscribed, subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            try await poster.send(.post(ClientFrame.Post(requestID: 2, flags: .ackWanted, name: posted, payload: ByteBuffer())))
            let frame = try await poster.next()
            #expect(frame.errorFrame?.code == .invalidName, "got \(frame.summary)")
            #expect(frame.errorFrame?.requestID == 2)
            try await subscriber.expectQuiet()
        }
    }

    @Test("A poster subscribed to its own name receives its own notification")
    func posterReceivesOwnNotification() async throws {
        try await withServer { server in
            let client = try await server.connect("self-subscriber")
            try await client.subscribe("org.example.echo", subscriptionID: 1, requestID: 1)
            try await client.send(.post(ClientFrame.Post(requestID: 2, flags: .ackWanted, name: "org.example.echo", payload: counterPayload(7))))
            var frames = [try await client.next(), try await client.next()]
            frames.sort { $0.summary < $1.summary }  // the relative order of POSTED and the copy is unspecified
            guard case .notification(let notification) = frames[0], case .posted(2, let sequence, 1) = frames[1] else {
                Issue.record("expected one NOTIFICATION and POSTED(2, _, 1), got \(frames.map(\.summary))")
                return
            }
            #expect(notification.sequence == sequence)
            #expect(counter(of: notification.payload) == 7)
            try await client.expectQuiet()
        }
    }

    @Test("One poster's 5,000 notifications reach two subscribers complete and in order")
    func orderingUnderLoad() async throws {
        let total: UInt32 = 5_000
        let name = "org.example.ordered"
        try await withServer { server in
            let first = try await server.connect("first")
            try await first.subscribe(name, subscriptionID: 1, requestID: 1)
            let second = try await server.connect("second")
            try await second.subscribe(name, subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            let posts = (0..<total).map { index in
                ClientFrame.post(ClientFrame.Post(requestID: index + 1, name: name, payload: counterPayload(index, size: 16)))
            }
            try await poster.send(posts)
            try await poster.expectQuiet()

            for subscriber in [first, second] {
                var lastSequence: UInt64 = 0
                for expected in 0..<total {
                    let notification = try await subscriber.nextNotification()
                    guard counter(of: notification.payload) == expected, notification.sequence > lastSequence else {
                        Issue.record(
                            "\(subscriber.name): notification #\(expected) has counter \(String(describing: counter(of: notification.payload))) and sequence \(notification.sequence) after \(lastSequence)")
                        return
                    }
                    lastSequence = notification.sequence
                }
                #expect(lastSequence == UInt64(total))
                try await subscriber.expectQuiet()
            }
            let snapshot = try await server.snapshot()
            #expect(snapshot.posts == UInt64(total))
            #expect(snapshot.deliveries == 2 * UInt64(total))
        }
    }

    @Test("Posts from a client that disconnects abruptly right after posting are still delivered")
    func postsThenAbruptClose() async throws {
        try await withServer { server in
            let name = "org.example.parting"
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe(name, subscriptionID: 1, requestID: 1)

            // The poster never reads: once its HELLO was processed, WELCOME sits unread in its receive queue, so
            // closing makes the daemon's read after the POST bytes fail with ECONNRESET instead of end of file.
            let poster = try await TestClient.connect(to: server.socketPath, name: "parting", reading: false)
            try await poster.send(.hello(ClientFrame.Hello(clientName: "parting")))
            try await server.waitForSnapshot("the parting poster's HELLO processed") {
                $0.clients.contains { $0.clientName == "parting" }
            }
            // 16 posts of exactly 1,024 bytes: 16,384 bytes, the daemon's initial receive buffer size, so one read
            // takes them all and the next read reports the reset.
            var posts = ByteBuffer()
            for index in 0..<16 {
                let payload = counterPayload(UInt32(index), size: 1_024 - 16 - name.utf8.count)
                ClientFrame.post(ClientFrame.Post(requestID: UInt32(index + 2), name: name, payload: payload)).encode(into: &posts)
            }
            #expect(posts.readableBytes == 16_384)

            // Hold the daemon's event loop while the posts are written and the socket closed, so the daemon sees
            // the bytes and the reset in one go.
            let daemonLoop = server.server.eventLoop
            let gate = DispatchSemaphore(value: 0)
            let blocked = OneShot<Void>()
            daemonLoop.execute {
                blocked.fulfill(.success(()))
                _ = gate.wait(timeout: .now() + 10)
            }
            try await blocked.wait(for: "the daemon's event loop to be held")
            do {
                try await poster.sendAndClose(posts)
            } catch {
                gate.signal()
                throw error
            }
            gate.signal()

            // Nothing else happens on the daemon until these notifications arrive.
            for index in 0..<16 {
                let notification: NotificationFrame
                do {
                    notification = try await subscriber.nextNotification()
                } catch {
                    let snapshot = try await server.snapshot()
                    let pending = snapshot.clients.first { $0.clientName == "subscriber" }?.pendingBytes ?? -1
                    throw TestFailure(
                        "\(error); the daemon accepted \(snapshot.posts) posts and holds \(pending) bytes for the subscriber")
                }
                #expect(counter(of: notification.payload) == UInt32(index))
                #expect(notification.sender == ownCredentials)
            }
            try await subscriber.expectQuiet()
        }
    }

    @Test("A closed subscriber's subscriptions are removed, whether it closes cleanly or abruptly")
    func disconnectRemovesSubscriptions() async throws {
        try await withServer { server in
            let name = "org.example.leaving"
            let staying = try await server.connect("staying")
            try await staying.subscribe(name, subscriptionID: 1, requestID: 1)
            let leaving = try await server.connect("leaving")
            try await leaving.subscribe(name, subscriptionID: 1, requestID: 1)
            try await leaving.subscribe(name, subscriptionID: 2, requestID: 2)
            let crashing = try await server.connect("crashing")
            try await crashing.subscribe(name, subscriptionID: 1, requestID: 1)
            try await crashing.setReading(false)
            let poster = try await server.connect("poster")

            #expect(try await poster.postAcked(name, requestID: 1).deliveredCount == 3)
            #expect(try await server.snapshot().names == 1)

            // A clean close (the daemon reads end of file).
            await leaving.close()
            try await server.waitForSnapshot("the cleanly closed subscriber gone") { $0.clients.count == 3 }
            #expect(try await poster.postAcked(name, requestID: 2).deliveredCount == 2)

            // An abrupt close: unread notifications in its receive queue make the daemon see a reset, not EOF.
            // (The snapshot runs on the daemon's loop after the notifications were written to the socket.)
            _ = try await server.snapshot()
            await crashing.close()
            try await server.waitForSnapshot("the abruptly closed subscriber gone") { $0.clients.count == 2 }
            #expect(try await poster.postAcked(name, requestID: 3).deliveredCount == 1)
            #expect(try await server.snapshot().names == 1)

            await staying.close()
            let snapshot = try await server.waitForSnapshot("no subscriber connections left") { $0.clients.count == 1 }
            #expect(snapshot.names == 0)
            #expect(try await poster.postAcked(name, requestID: 4).deliveredCount == 0)
        }
    }
}
