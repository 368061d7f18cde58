import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// State values (PROTOCOL.md § 6.6, § 6.7, § 9.6): a `u64` per name, set by whoever may post the name,
/// read by anyone without subscribing, limited per uid.
@Suite("State values", .timeLimit(.minutes(TestScale.minutes(1))))
struct StateValueTests {
    @Test("a value set by one uid is read back by others without subscribing; 0 is a value, never-set is none")
    func roundTrip() async throws {
        try await withServer(everyUser: true) { server in
            let alice = try await server.connect("alice", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            let root = try await server.connect("root")

            #expect(try await bob.state(of: "org.example.level") == nil, "never set: STATE without has_value")
            try await alice.setState("org.example.level", 42)
            #expect(try await bob.state(of: "org.example.level") == 42, "bob holds no subscription and still reads it")
            #expect(try await root.state(of: "org.example.level") == 42)
            #expect(try await alice.state(of: "org.example.level") == 42)

            try await bob.setState("org.example.level", UInt64.max)
            #expect(try await alice.state(of: "org.example.level") == UInt64.max, "the full u64 range round-trips")
            try await alice.setState("org.example.level", 0)
            #expect(try await bob.state(of: "org.example.level") == 0, "0 is a real value, not 'unset'")
            #expect(try await bob.state(of: "org.example.other") == nil)

            let status = try await server.status()
            #expect(status.stateNames == 1)
        }
    }

    @Test("setting a state does not post, and posting does not change the state")
    func stateIsNotANotification() async throws {
        try await withServer(everyUser: true) { server in
            let subscriber = try await server.connect("subscriber", as: .bob)
            try await subscriber.subscribe("org.example.level", id: 1)
            try await subscriber.subscribe("org.example.>", id: 2)
            let setter = try await server.connect("setter", as: .alice)
            let before = try await server.status().posts

            try await setter.setState("org.example.level", 7)
            try await subscriber.expectQuiet("SET_STATE must not notify anyone")
            #expect(try await server.status().posts == before, "SET_STATE takes no sequence number")

            let posted = try await setter.post("org.example.level", "99")
            #expect(posted.delivered == 1)
            let notification = try await subscriber.nextNotification()
            #expect(notification.payloadText == "99")
            #expect(try await setter.state(of: "org.example.level") == 7, "a post leaves the state alone")
        }
    }

    @Test("user.<uid>. state: that uid and root may set and read it, another uid is refused both, naming the built-in rule")
    func userNamespace() async throws {
        try await withServer(everyUser: true) { server in
            let alice = try await server.connect("alice", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            let root = try await server.connect("root")

            try await alice.setState("user.4201.mood", 1)
            let denied = try await bob.setStateRefused("user.4201.mood", 2)
            #expect(denied.code == .permissionDenied)
            #expect(!denied.closesConnection, "permission-denied answers one request; the connection stays usable")
            #expect(
                denied.message
                    == "permission denied: only uid 4201 and root may set the state of names under 'user.4201.' (built-in rule); you are uid 4202")
            #expect(try await alice.state(of: "user.4201.mood") == 1, "the refused SET_STATE changed nothing")
            let unreadable = try await bob.stateRefused(of: "user.4201.mood")
            #expect(unreadable.code == .permissionDenied && !unreadable.closesConnection)
            #expect(unreadable.message == "permission denied: you may not observe names under 'user.4201' (built-in rule)")

            try await root.setState("user.4201.mood", 3)
            #expect(try await alice.state(of: "user.4201.mood") == 3, "root may set any user's state")
            #expect(try await root.state(of: "user.4201.mood") == 3, "and read it")
            try await bob.setState("user.4202.mood", 4)
            #expect(try await bob.state(of: "user.4202.mood") == 4)

            // Only the canonical decimal form names a uid; fewer than three labels is an ordinary name.
            try await bob.setState("user.04201.mood", 5)
            try await bob.setState("user.+4201.mood", 5)
            try await bob.setState("user.4201", 6)
            try await bob.setState("user.alice.mood", 7)
            try await bob.expectQuiet("bob's connection is still usable")
        }
    }

    @Test("state-names-per-uid: a first value beyond the quota is refused, changing a value is always allowed, root is exempt")
    func stateNamesQuota() async throws {
        try await withServer(everyUser: true, { $0.access.quotas.stateNamesPerUID = 2 }) { server in
            let alice = try await server.connect("alice", as: .alice)
            let aliceAgain = try await server.connect("alice-2", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            let root = try await server.connect("root")

            try await bob.setState("quota.bob.1", 1)
            try await alice.setState("quota.alice.1", 1)
            try await aliceAgain.setState("quota.alice.2", 2)
            let refused = try await alice.setStateRefused("quota.alice.3", 3)
            #expect(refused.code == .quotaExceeded)
            #expect(!refused.closesConnection)
            #expect(refused.message == "uid 4201 already set the state of the maximum of 2 names (quota state-names-per-uid)")
            let refusedAgain = try await aliceAgain.setStateRefused("quota.alice.3", 3)
            #expect(refusedAgain.code == .quotaExceeded, "the quota counts all connections of the uid together")
            #expect(try await bob.state(of: "quota.alice.3") == nil, "the refused SET_STATE stored nothing")

            try await alice.setState("quota.alice.1", 10)
            try await alice.setState("quota.bob.1", 11)
            #expect(try await bob.state(of: "quota.alice.1") == 10, "changing a name that has a value is always allowed")
            #expect(try await bob.state(of: "quota.bob.1") == 11, "even a name another uid gave its first value")

            try await bob.setState("quota.bob.2", 2)
            let bobRefused = try await bob.setStateRefused("quota.bob.3", 3)
            #expect(bobRefused.code == .quotaExceeded, "bob has his own quota of 2")
            for index in 1...5 { try await root.setState("quota.root.\(index)", UInt64(index)) }
        }
    }

    @Test("SET_STATE and GET_STATE refuse names that break the grammar, patterns and process-local names")
    func invalidNames() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            for name in ["org..x", "org.*", "org.example.>", "self.cache", ""] {
                let setError = try await client.setStateRefused(name, 1)
                #expect(setError.code == .invalidName, "SET_STATE '\(name)': \(setError)")
                let getError = try await client.expectError("GET_STATE '\(name)'") { .getState(requestID: $0, name: name) }
                #expect(getError.code == .invalidName, "GET_STATE '\(name)': \(getError)")
            }
            try await client.expectQuiet("invalid-name is not fatal")
        }
    }
}
