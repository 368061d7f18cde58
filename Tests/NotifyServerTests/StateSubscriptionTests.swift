import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// State subscriptions (PROTOCOL.md § 6.2 states flag, § 7.14 `STATE_CHANGED`, § 9.6): a connection watching a
/// name's state value is sent every change, and on request the current values before the `OK`.
@Suite("State subscriptions", .timeLimit(.minutes(TestScale.minutes(1))))
struct StateSubscriptionTests {
    @Test("changes reach a watcher by exact name and by pattern, once per change however many of its subscriptions match")
    func changesByNameAndPattern() async throws {
        try await withServer(everyUser: true) { server in
            let watcher = try await server.connect("watcher", as: .bob)
            #expect(try await watcher.watchStates("org.example.level", id: 1).isEmpty, "no current values unless asked")
            try await watcher.watchStates("org.example.*", id: 2)
            let setter = try await server.connect("setter", as: .alice)

            try await setter.setState("org.example.level", 7)
            let change = try await watcher.nextStateChange()
            #expect(change == StateChangedFrame(
                requestID: 0, isCurrent: false, value: 7, sender: change.sender, name: "org.example.level"))
            #expect(change.sender.uid == 4201 && change.sender.gid == 4301 && change.sender.pid != 0, "the setter's SO_PEERCRED")
            try await watcher.expectQuiet("two subscriptions match, and the change still comes once")

            try await setter.setState("org.example.other", 3)
            #expect(try await watcher.nextStateChange().name == "org.example.other", "by the pattern alone")
            try await setter.setState("org.example.other", 3)
            let same = try await watcher.nextStateChange()
            #expect(same.name == "org.example.other" && same.value == 3, "setting the same value again is a change too")
            try await setter.setState("org.elsewhere.level", 1)
            try await watcher.expectQuiet("a name no subscription matches")
        }
    }

    @Test("a state subscription delivers no notifications, and a notification subscription no state changes")
    func statesAndNotificationsAreApart() async throws {
        try await withServer(everyUser: true) { server in
            let watcher = try await server.connect("watcher", as: .bob)
            try await watcher.watchStates("org.example.>", id: 1, current: true)
            let subscriber = try await server.connect("subscriber", as: .bob)
            try await subscriber.subscribe("org.example.>", id: 1, retained: true)
            let poster = try await server.connect("poster", as: .alice)

            let posted = try await poster.post("org.example.level", "hello", retain: true)
            #expect(posted.delivered == 1, "the watcher is not a recipient")
            try await watcher.expectQuiet("a post reaches no state subscription")
            #expect(try await subscriber.nextNotification().payloadText == "hello")

            try await poster.setState("org.example.level", 1)
            #expect(try await watcher.nextStateChange().value == 1)
            try await subscriber.expectQuiet("a state change reaches no notification subscription")
            let late = try await server.connect("late", as: .bob)
            let current = try await late.watchStates("org.example.>", id: 1, current: true)
            #expect(current.map(\.summary) == [ServerFrame.stateChanged(StateChangedFrame(
                requestID: current.first?.stateChange?.requestID ?? 0, isCurrent: true, value: 1,
                sender: SenderCredentials(pid: 0, uid: 0, gid: 0), name: "org.example.level")).summary],
                "its current value, no RETAINED although the name has a retained notification")
        }
    }

    @Test("send-retained with states: the current values of the matching names, sorted by name, before the OK")
    func currentValuesBeforeOK() async throws {
        try await withServer(everyUser: true) { server in
            let setter = try await server.connect("setter", as: .alice)
            try await setter.setState("org.example.b", 2)
            try await setter.setState("org.example.a", 1)
            try await setter.setState("org.example.c.deeper", 3)
            try await setter.setState("org.other", 4)

            let watcher = try await server.connect("watcher", as: .bob)
            let (reply, before) = try await watcher.request {
                .testSubscribe(
                    requestID: $0, subscriptionID: 1, name: "org.example.*", flags: [.sendRetained, .states])
            }
            guard case .ok(let requestID) = reply else { throw TestFailure("expected OK, got \(reply.summary)") }
            let changes = before.compactMap(\.stateChange)
            #expect(changes.count == before.count, "only STATE_CHANGED before the OK: \(before.map(\.summary))")
            #expect(changes.map(\.name) == ["org.example.a", "org.example.b"], "sorted by name, matching names only")
            #expect(changes.map(\.value) == [1, 2])
            #expect(changes.allSatisfy { $0.requestID == requestID && $0.isCurrent }, "the SUBSCRIBE's id and the current flag")
            #expect(changes.allSatisfy { $0.sender == SenderCredentials(pid: 0, uid: 0, gid: 0) })

            #expect(try await watcher.watchStates("org.example.a", id: 2, current: true).compactMap(\.stateChange?.value) == [1])
            #expect(try await watcher.watchStates("org.example.nothing", id: 3, current: true).isEmpty)
        }
    }

    @Test("a user.<uid>. name of another uid is neither listed nor sent; a subscription under it is refused like any")
    func permissions() async throws {
        try await withServer(everyUser: true) { server in
            let alice = try await server.connect("alice", as: .alice)
            try await alice.setState("user.4201.mood", 1)
            let bob = try await server.connect("bob", as: .bob)
            try await bob.setState("user.4202.mood", 2)

            let listed = try await bob.watchStates("user.*.mood", id: 1, current: true)
            #expect(listed.compactMap(\.stateChange?.name) == ["user.4202.mood"], "only its own: \(listed.map(\.summary))")
            let root = try await server.connect("root")
            try await root.watchStates("user.*.mood", id: 1)
            try await alice.setState("user.4201.mood", 3)
            #expect(try await root.nextStateChange().value == 3, "root may observe anything")
            try await bob.expectQuiet("bob may not observe uid 4201's names")
            let own = try await bob.expectOK("SET_STATE") { .setState(requestID: $0, name: "user.4202.mood", value: 4) }
            #expect(own.compactMap(\.stateChange?.value) == [4], "its own name, before its OK")

            let plain = try await bob.subscribeRefused("user.4201.mood", id: 2)
            let states = try await bob.expectError("SUBSCRIBE states 'user.4201.mood'") {
                .testSubscribe(requestID: $0, subscriptionID: 2, name: "user.4201.mood", flags: [.states, .sendRetained])
            }
            #expect(plain.code == .permissionDenied && !plain.closesConnection)
            #expect(states.code == plain.code && states.message == plain.message, "refused exactly like a plain one")
        }
    }

    @Test("a connection that asked for no echo is not sent its own changes; others, and one that echoes, are")
    func noEcho() throws {
        let daemon = EmbeddedBroker()
        let quiet = try daemon.connect("quiet")
        try quiet.send(.hello(ClientFrame.Hello(flags: HelloFlags.noEcho, clientName: "quiet")))
        _ = try quiet.received()
        try quiet.watchStates("org.>", id: 1)
        let echoing = try daemon.connect("echoing")
        try echoing.hello()
        try echoing.watchStates("org.>", id: 1)

        try quiet.send(.setState(requestID: 5, name: "org.a", value: 1))
        #expect(try quiet.received().map(\.summary) == ["OK(5)"], "not its own change")
        let toEchoing = try echoing.received()
        #expect(toEchoing.compactMap(\.stateChange?.value) == [1])

        try echoing.send(.setState(requestID: 6, name: "org.a", value: 2))
        let own = try echoing.received()
        #expect(own.map(\.stateChange?.value) == [2, nil], "its own change, before the OK: \(own.map(\.summary))")
        #expect(try quiet.received().compactMap(\.stateChange?.value) == [2])
    }

    @Test("changes are never held: a suspended watcher gets them at once, ahead of the notifications it holds")
    func notHeldWhileSuspended() throws {
        let daemon = EmbeddedBroker()
        let watcher = try daemon.connect("watcher")
        try watcher.hello()
        try watcher.subscribe("org.>", id: 1)
        try watcher.watchStates("org.>", id: 2)
        try watcher.send(.suspend(requestID: 3))
        #expect(try watcher.received().map(\.summary) == ["OK(3)"])
        let setter = try daemon.connect("setter")
        try setter.hello()

        try setter.send(
            .post(ClientFrame.Post(requestID: 4, flags: .ackWanted, name: "org.a", payload: ByteBuffer(string: "held"))),
            .setState(requestID: 5, name: "org.a", value: 9))
        _ = try setter.received()
        let whileSuspended = try watcher.received()
        #expect(whileSuspended.map(\.stateChange?.value) == [9], "the change, not the held notification: \(whileSuspended.map(\.summary))")

        try watcher.send(.resume(requestID: 6))
        let afterResume = try watcher.received()
        #expect(afterResume.map(\.summary).first == "OK(6)")
        #expect(afterResume.compactMap(\.notification?.payloadText) == ["held"], "posted before the change, released after it")
    }

    @Test("a stalled watcher is closed as a slow consumer when a change does not fit; the others get every change")
    func stalledWatcherIsDisconnected() throws {
        let daemon = EmbeddedBroker { $0.outboundByteLimit = 4_096 }
        let stalled = try daemon.connectStalled(
            "stalled", sending: [.testSubscribe(requestID: 1, subscriptionID: 1, name: "org.>", flags: .states)])
        let healthy = try daemon.connect("healthy")
        try healthy.hello()
        try healthy.watchStates("org.example.level", id: 1)
        let setter = try daemon.connect("setter")
        try setter.hello()

        // 53 bytes a change: far more than 4 KiB in all.
        try setter.send((1...200).map { .setState(requestID: UInt32($0), name: "org.example.level", value: UInt64($0)) })
        #expect(try setter.received().map(\.summary) == (1...200).map { "OK(\($0))" }, "the setter is not slowed")
        let toHealthy = try healthy.received()
        #expect(toHealthy.compactMap(\.stateChange?.value) == (1...200).map(UInt64.init), "nothing lost: \(toHealthy.count) \(toHealthy.prefix(3).map(\.summary))")

        try stalled.expectClosedAsSlowConsumer(over: "org.example.level", posted: 200) { $0.stateChange?.value }
        daemon.run()
        #expect(!stalled.isActive)
        #expect(daemon.broker.statistics.slowConsumerDisconnects == 1)
        #expect(daemon.broker.stateWatchers.exactSubscribers(of: "org.example.level")?.count == 1, "only the healthy one left")
    }

    @Test("UNSUBSCRIBE ends a state subscription; a closed connection leaves no watcher behind")
    func unsubscribeStops() async throws {
        try await withServer(everyUser: true) { server in
            let watcher = try await server.connect("watcher", as: .bob)
            try await watcher.watchStates("org.example.*", id: 4)
            #expect(try await server.status().subscriptions == 1, "counted like any subscription")
            let setter = try await server.connect("setter", as: .alice)
            try await setter.setState("org.example.level", 1)
            #expect(try await watcher.nextStateChange().value == 1)

            try await watcher.unsubscribe(id: 4)
            try await setter.setState("org.example.level", 2)
            try await watcher.expectQuiet("unsubscribed")
            #expect(try await server.status().subscriptions == 0)
            let again = try await watcher.expectError("UNSUBSCRIBE 4 again") { .unsubscribe(requestID: $0, subscriptionID: 4) }
            #expect(again.code == .unknownSubscription)
        }
    }

    @Test("a state subscription's id is unique with the others', and counts against max_subscriptions")
    func idsAndLimits() async throws {
        try await withServer(everyUser: true, { $0.limits.maxSubscriptions = 2 }) { server in
            let client = try await server.connect("client", as: .bob)
            try await client.subscribe("org.a", id: 1)
            let duplicate = try await client.expectError("SUBSCRIBE states with a used id") {
                .testSubscribe(requestID: $0, subscriptionID: 1, name: "org.b", flags: .states)
            }
            #expect(duplicate.code == .duplicateSubscription)
            try await client.watchStates("org.b", id: 2)
            let tooMany = try await client.expectError("a third subscription") {
                .testSubscribe(requestID: $0, subscriptionID: 3, name: "org.c", flags: .states)
            }
            #expect(tooMany.code == .tooManySubscriptions)
            let reserved = try await client.expectError("a reserved flag") {
                .testSubscribe(requestID: $0, subscriptionID: 3, name: "org.c", flags: SubscribeFlags(rawValue: 0x08))
            }
            #expect(reserved.code == .unsupportedFlags)
        }
    }
}

extension TestClient {
    /// Subscribes with the states flag (and send-retained with `current`) and expects `OK`; returns the frames
    /// before it.
    @discardableResult
    func watchStates(_ pattern: String, id: UInt32, current: Bool = false) async throws -> [ServerFrame] {
        try await expectOK("SUBSCRIBE states '\(pattern)'") {
            .testSubscribe(
                requestID: $0, subscriptionID: id, name: pattern, flags: current ? [.states, .sendRetained] : .states)
        }
    }

    /// The next frame, which must be a `STATE_CHANGED`.
    func nextStateChange() async throws -> StateChangedFrame {
        let frame = try await next()
        guard let change = frame.stateChange else { throw TestFailure("'\(name)': expected STATE_CHANGED, got \(frame.summary)") }
        return change
    }
}

extension EmbeddedPeer {
    /// Subscribes with the states flag and expects exactly `OK` back.
    func watchStates(_ pattern: String, id: UInt32) throws {
        try send(.testSubscribe(requestID: id, subscriptionID: id, name: pattern, flags: .states))
        let frames = try received()
        guard frames.map(\.summary) == ["OK(\(id))"] else {
            throw TestFailure("peer '\(name)': expected OK(\(id)) for SUBSCRIBE states '\(pattern)', got \(frames.map(\.summary))")
        }
    }
}

extension ServerFrame {
    /// The fields of a `STATE_CHANGED`, if this is one.
    var stateChange: StateChangedFrame? {
        if case .stateChanged(let change) = self { return change }
        return nil
    }
}
