import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// A poster's next plain post to the name of its last run resumes that run's route instead of being routed
/// again (`PostRun.ParkedRoute`). Each test posts one notification per write and waits for it to arrive, so
/// every post after the first takes the parked route; what clients see must be what routing afresh gives.
@Suite("Parked routes", .timeLimit(.minutes(TestScale.minutes(2))))
struct ParkedRouteTests {
    private static func post(_ name: String, _ text: String) -> ClientFrame {
        .post(ClientFrame.Post(requestID: 0, name: name, payload: ByteBuffer(string: text)))
    }

    private static func expectPayload(
        _ text: String, at client: TestClient, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let notification = try await client.nextNotification()
        #expect(String(buffer: notification.payload) == text, sourceLocation: sourceLocation)
    }

    @Test("A connection that subscribes between two posts receives the second")
    func newSubscriberJoinsTheRoute() async throws {
        try await withServer { server in
            let first = try await server.connect("first")
            try await first.subscribe("parked.join", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")
            try await poster.send(Self.post("parked.join", "1"))
            try await Self.expectPayload("1", at: first)

            let late = try await server.connect("late")
            try await late.subscribe("parked.join", subscriptionID: 1, requestID: 1)
            try await poster.send(Self.post("parked.join", "2"))
            try await Self.expectPayload("2", at: first)
            try await Self.expectPayload("2", at: late)

            // A pattern subscription changes the route as well.
            let wildcard = try await server.connect("wildcard")
            try await wildcard.subscribe("parked.*", subscriptionID: 1, requestID: 1)
            try await poster.send(Self.post("parked.join", "3"))
            try await Self.expectPayload("3", at: first)
            try await Self.expectPayload("3", at: late)
            try await Self.expectPayload("3", at: wildcard)
            for client in [first, late, wildcard, poster] { try await client.expectQuiet() }
        }
    }

    @Test("A connection that unsubscribes or disconnects between two posts does not get the second")
    func leavingSubscribersLeaveTheRoute() async throws {
        try await withServer { server in
            let staying = try await server.connect("staying")
            try await staying.subscribe("parked.leave", subscriptionID: 1, requestID: 1)
            let leaving = try await server.connect("leaving")
            try await leaving.subscribe("parked.leave", subscriptionID: 7, requestID: 1)
            let closing = try await server.connect("closing")
            try await closing.subscribe("parked.leave", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            try await poster.send(Self.post("parked.leave", "1"))
            for client in [staying, leaving, closing] { try await Self.expectPayload("1", at: client) }

            try await leaving.unsubscribe(subscriptionID: 7, requestID: 2)
            try await poster.send(Self.post("parked.leave", "2"))
            try await Self.expectPayload("2", at: staying)
            try await Self.expectPayload("2", at: closing)
            try await leaving.expectQuiet()

            await closing.close()
            try await server.waitForSnapshot("the closed subscriber gone") { $0.clients.count == 3 }
            try await poster.send(Self.post("parked.leave", "3"))
            try await Self.expectPayload("3", at: staying)
            try await staying.expectQuiet()
            try await leaving.expectQuiet()
            let snapshot = try await server.snapshot()
            #expect(snapshot.posts == 3)
            #expect(snapshot.deliveries == 3 + 2 + 1)
        }
    }

    @Test("A poster is listed once however many routes it parks, and a closed connection clears the list")
    func parkedRoutesStayBounded() async throws {
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("parked.bounded", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")
            for index in 1...50 {
                try await poster.send(Self.post("parked.bounded", "\(index)"))
                try await Self.expectPayload("\(index)", at: subscriber)
            }
            #expect(try await withBroker(of: server.server) { $0.parkedPosterCount } == 1)
            let bystander = try await server.connect("bystander")
            await bystander.close()
            try await server.waitForSnapshot("the bystander gone") { $0.clients.count == 2 }
            #expect(try await withBroker(of: server.server) { $0.parkedPosterCount } == 0)
            // The first post to a name with one subscriber goes to it alone (no run, nothing parked); the second in
            // a row opens a run, which parks its route.
            try await poster.send(Self.post("parked.bounded", "after"))
            try await Self.expectPayload("after", at: subscriber)
            try await poster.send(Self.post("parked.bounded", "again"))
            try await Self.expectPayload("again", at: subscriber)
            #expect(try await withBroker(of: server.server) { $0.parkedPosterCount } == 1)
        }
    }

    @Test("Posters taking turns one post at a time each reach their own name's subscribers, in order")
    func postersTakingTurns() async throws {
        try await withServer { server in
            let observerA = try await server.connect("observer-a")
            try await observerA.subscribe("parked.turns.a", subscriptionID: 1, requestID: 1)
            let observerB = try await server.connect("observer-b")
            try await observerB.subscribe("parked.turns.b", subscriptionID: 1, requestID: 1)
            let both = try await server.connect("both")
            try await both.subscribe("parked.turns.*", subscriptionID: 1, requestID: 1)
            let posterA = try await server.connect("poster-a")
            let posterB = try await server.connect("poster-b")

            var lastSequence: UInt64 = 0
            for round in 1...40 {
                // Poster A switches names now and then: its parked route must not outlive the name.
                let nameA = round % 10 == 0 ? "parked.turns.b" : "parked.turns.a"
                try await posterA.send(Self.post(nameA, "a\(round)"))
                try await Self.expectPayload("a\(round)", at: round % 10 == 0 ? observerB : observerA)
                let fromA = try await both.nextNotification()
                #expect(fromA.name == nameA && String(buffer: fromA.payload) == "a\(round)")
                #expect(fromA.sequence > lastSequence)

                try await posterB.send(Self.post("parked.turns.b", "b\(round)"))
                try await Self.expectPayload("b\(round)", at: observerB)
                let fromB = try await both.nextNotification()
                #expect(fromB.name == "parked.turns.b" && String(buffer: fromB.payload) == "b\(round)")
                #expect(fromB.sequence == fromA.sequence + 1)
                lastSequence = fromB.sequence
            }
            for client in [observerA, observerB, both, posterA, posterB] { try await client.expectQuiet() }
        }
    }

    @Test("A post that differs from the parked route's (flags, payload size, name) is checked in full")
    func differingPostsAreCheckedInFull() async throws {
        try await withServer({ $0.limits.maxPayloadLength = 16 }) { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("parked.checked", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")
            try await poster.send(Self.post("parked.checked", "1"))
            try await Self.expectPayload("1", at: subscriber)

            try await poster.send(
                .post(ClientFrame.Post(requestID: 5, name: "parked.checked", payload: ByteBuffer(repeating: 0x41, count: 17))))
            #expect(try await poster.nextError().code == .payloadTooLarge)
            try await poster.send(.post(ClientFrame.Post(requestID: 6, flags: PostFlags(rawValue: 0x80), name: "parked.checked", payload: ByteBuffer())))
            #expect(try await poster.nextError().code == .unsupportedFlags)
            try await poster.send(Self.post("parked..bad", "x"))
            #expect(try await poster.nextError().code == .invalidName)
            let acked = try await poster.postAcked("parked.checked", payload: Array("4".utf8), requestID: 9)
            #expect(acked.deliveredCount == 1)
            try await Self.expectPayload("4", at: subscriber)
            try await poster.send(Self.post("parked.checked", "5"))
            try await Self.expectPayload("5", at: subscriber)
            try await subscriber.expectQuiet()
            try await poster.expectQuiet()
        }
    }
}

/// Access rules reloaded between two posts apply to the second, parked route or not.
@Suite("Parked routes and access reloads", .timeLimit(.minutes(TestScale.minutes(2))))
struct ParkedRouteAccessTests {
    @Test("After a reload, a poster's next post to its parked name is refused, and an observer loses it")
    func reloadOutdatesParkedRoutes() async throws {
        try await withServer(everyUser: true) { server in
            let owner = try await server.connect("root")
            try await owner.subscribe("org.example.parked", id: 1)
            let observer = try await server.connect("bob", as: .bob)
            try await observer.subscribe("org.example.parked", id: 1)
            let alice = try await server.connect("alice", as: .alice)
            try await alice.postUnacknowledged("org.example.parked", ByteBuffer(string: "open"))
            for client in [owner, observer] {
                #expect(String(buffer: try await client.nextNotification().payload) == "open")
            }
            // Root posts too, so its route is parked as well.
            try await owner.postUnacknowledged("org.example.parked", ByteBuffer(string: "root-open"))
            for client in [owner, observer] {
                #expect(String(buffer: try await client.nextNotification().payload) == "root-open")
            }

            await server.server.updateAccess(try parseAccess("reserve org.example post=owner observe=owner"))
            try await alice.postUnacknowledged("org.example.parked", ByteBuffer(string: "closed"))
            let refusal = try await alice.next()
            #expect(refusal.errorFrame?.code == .permissionDenied, "got \(refusal.summary)")
            try await owner.postUnacknowledged("org.example.parked", ByteBuffer(string: "root-closed"))
            #expect(String(buffer: try await owner.nextNotification().payload) == "root-closed")
            #expect(try await observer.barrier().isEmpty, "bob may no longer observe the name")
            #expect(try await owner.barrier().isEmpty)
        }
    }
}
