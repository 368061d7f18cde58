import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

@Suite("Subscriptions", .timeLimit(.minutes(TestScale.minutes(2))))
struct SubscriptionTests {
    @Test("Two subscriptions of one connection to a name: one copy per post, counted once, until both are gone")
    func doubleSubscription() async throws {
        try await withServer { server in
            let name = "org.example.twice"
            let subscriber = try await server.connect("twice")
            try await subscriber.subscribe(name, subscriptionID: 1, requestID: 1)
            try await subscriber.subscribe(name, subscriptionID: 2, requestID: 2)
            let poster = try await server.connect("poster")

            var snapshot = try await server.snapshot()
            #expect(snapshot.names == 1)
            #expect(snapshot.clients.first { $0.clientName == "twice" }?.subscriptions == 2)

            let first = try await poster.postAcked(name, payload: [1], requestID: 1)
            #expect(first.deliveredCount == 1)
            #expect(try await subscriber.nextNotification().sequence == first.sequence)
            try await subscriber.expectQuiet()

            try await subscriber.unsubscribe(subscriptionID: 1, requestID: 3)
            let second = try await poster.postAcked(name, payload: [2], requestID: 2)
            #expect(second.deliveredCount == 1)
            #expect(try await subscriber.nextNotification().sequence == second.sequence)
            try await subscriber.expectQuiet()

            try await subscriber.unsubscribe(subscriptionID: 2, requestID: 4)
            let third = try await poster.postAcked(name, payload: [3], requestID: 3)
            #expect(third.deliveredCount == 0)
            try await subscriber.expectQuiet()

            snapshot = try await server.snapshot()
            #expect(snapshot.names == 0)
            #expect(snapshot.clients.first { $0.clientName == "twice" }?.subscriptions == 0)
        }
    }

    @Test("Subscribers of one name come and go: each post reaches exactly the connections subscribed at the time")
    func subscribersComeAndGo() async throws {
        try await withServer { server in
            let name = "org.example.crowd"
            let poster = try await server.connect("poster")
            var clients: [TestClient] = []
            for index in 0..<3 {
                let client = try await server.connect("crowd-\(index)")
                try await client.subscribe(name, subscriptionID: 7, requestID: 1)
                clients.append(client)
            }
            // One subscriber, then three, then (unsubscribing the middle and closing the first) one again.
            var posted = try await poster.postAcked(name, payload: [1], requestID: 1)
            #expect(posted.deliveredCount == 3)
            for client in clients { #expect(try await client.nextNotification().sequence == posted.sequence) }

            try await clients[1].unsubscribe(subscriptionID: 7, requestID: 2)
            posted = try await poster.postAcked(name, payload: [2], requestID: 2)
            #expect(posted.deliveredCount == 2)
            #expect(try await clients[0].nextNotification().sequence == posted.sequence)
            #expect(try await clients[2].nextNotification().sequence == posted.sequence)

            await clients[0].close()
            _ = try await server.waitForSnapshot("crowd-0 closed") { $0.clients.count == 3 }
            posted = try await poster.postAcked(name, payload: [3], requestID: 3)
            #expect(posted.deliveredCount == 1)
            #expect(try await clients[2].nextNotification().sequence == posted.sequence)

            // The last one goes and comes back on a fresh subscription.
            try await clients[2].unsubscribe(subscriptionID: 7, requestID: 3)
            #expect(try await poster.postAcked(name, payload: [4], requestID: 4).deliveredCount == 0)
            try await clients[1].subscribe(name, subscriptionID: 8, requestID: 4)
            posted = try await poster.postAcked(name, payload: [5], requestID: 5)
            #expect(posted.deliveredCount == 1)
            #expect(try await clients[1].nextNotification().sequence == posted.sequence)
            try await clients[1].expectQuiet()
            try await clients[2].expectQuiet()
        }
    }

    @Test("UNSUBSCRIBE of an unknown id is answered with unknown-subscription; the connection stays usable")
    func unknownSubscription() async throws {
        try await withServer { server in
            let client = try await server.connect("unsubscriber")
            try await client.send(.unsubscribe(requestID: 77, subscriptionID: 5))
            let error = try await client.nextError()
            #expect(error.code == .unknownSubscription)
            #expect(error.requestID == 77)
            #expect(!error.closesConnection)
            try await client.expectQuiet()

            // An id that was removed is unknown again.
            try await client.subscribe("org.example.once", subscriptionID: 5, requestID: 78)
            try await client.unsubscribe(subscriptionID: 5, requestID: 79)
            try await client.send(.unsubscribe(requestID: 80, subscriptionID: 5))
            let again = try await client.nextError()
            #expect(again.code == .unknownSubscription)
            #expect(again.requestID == 80)
            #expect(!again.closesConnection)

            // And usable: it can subscribe and receive.
            try await client.subscribe("org.example.after", subscriptionID: 6, requestID: 81)
            let poster = try await server.connect("poster")
            #expect(try await poster.postAcked("org.example.after", requestID: 1).deliveredCount == 1)
            #expect(try await client.nextNotification().name == "org.example.after")
        }
    }

    @Test("SUBSCRIBE with an id already in use is answered with duplicate-subscription and changes nothing")
    func duplicateSubscription() async throws {
        try await withServer { server in
            let client = try await server.connect("duplicator")
            try await client.subscribe("org.example.first", subscriptionID: 9, requestID: 1)
            try await client.send(.testSubscribe(requestID: 2, subscriptionID: 9, name: "org.example.second"))
            let error = try await client.nextError()
            #expect(error.code == .duplicateSubscription)
            #expect(error.requestID == 2)
            #expect(!error.closesConnection)
            try await client.expectQuiet()

            let poster = try await server.connect("poster")
            #expect(try await poster.postAcked("org.example.second", requestID: 1).deliveredCount == 0)
            #expect(try await poster.postAcked("org.example.first", requestID: 2).deliveredCount == 1)
            #expect(try await client.nextNotification().name == "org.example.first")
            try await client.expectQuiet()
            #expect(try await server.snapshot().clients.first { $0.clientName == "duplicator" }?.subscriptions == 1)

            // The id becomes free once its subscription is removed.
            try await client.unsubscribe(subscriptionID: 9, requestID: 3)
            try await client.subscribe("org.example.second", subscriptionID: 9, requestID: 4)
        }
    }

    @Test("A connection cannot hold more than max_subscriptions subscriptions")
    func tooManySubscriptions() async throws {
        try await withServer({ $0.limits.maxSubscriptions = 2 }) { server in
            let client = try await server.connect("collector")
            try await client.subscribe("org.example.a", subscriptionID: 1, requestID: 1)
            try await client.subscribe("org.example.a", subscriptionID: 2, requestID: 2)  // same name counts too
            try await client.send(.testSubscribe(requestID: 3, subscriptionID: 3, name: "org.example.b"))
            let error = try await client.nextError()
            #expect(error.code == .tooManySubscriptions)
            #expect(error.requestID == 3)
            #expect(!error.closesConnection)
            try await client.expectQuiet()

            // Checked after the name and the id: a duplicate id is reported as such even at the limit.
            try await client.send(.testSubscribe(requestID: 4, subscriptionID: 2, name: "org.example.b"))
            #expect(try await client.nextError().code == .duplicateSubscription)
            try await client.send(.testSubscribe(requestID: 5, subscriptionID: 4, name: "bad name"))
            #expect(try await client.nextError().code == .invalidName)

            let poster = try await server.connect("poster")
            #expect(try await poster.postAcked("org.example.b", requestID: 1).deliveredCount == 0)

            // Removing one makes room for one.
            try await client.unsubscribe(subscriptionID: 1, requestID: 6)
            try await client.subscribe("org.example.b", subscriptionID: 3, requestID: 7)
            #expect(try await poster.postAcked("org.example.b", requestID: 2).deliveredCount == 1)
            #expect(try await client.nextNotification().name == "org.example.b")
            #expect(try await server.snapshot().clients.first { $0.clientName == "collector" }?.subscriptions == 2)
        }
    }
}
