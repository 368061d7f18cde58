import Dispatch
import Foundation
import NotifyServer
import NotifyTestSupport
import NotifyWire
import Testing

@testable import Notify

/// What the daemon offers beyond plain posts, through the client library against an in-process daemon: pattern
/// observations, current values, state, suspend/resume, merge counts and drop notices, introspection.
///
/// Handlers run `.immediate` (on the I/O thread, in arrival order), so when `synchronize()` returns, every
/// notification that arrived before the daemon's `PONG` has been handed to its handler.
@Suite("Client library: patterns, current values, state, suspension, merges, drops, introspection", .timeLimit(.minutes(TestScale.minutes(1))))
struct ClientFeatureTests {
    /// Collects the events of a center from now on.
    static func collectEvents(_ center: NotifyCenter) -> (Collector<ConnectionEvent>, Task<Void, Never>) {
        let events = center.connectionEvents()
        let collector = Collector<ConnectionEvent>()
        let task = Task {
            for await event in events { collector.append(event) }
        }
        return (collector, task)
    }

    @Test("pattern observations receive the right names; exact and pattern observations in one process each get a notification once")
    func patterns() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let poster = try await daemon.center()
        let rest = Collector<String>()
        let star = Collector<String>()
        let exact = Collector<String>()
        let observations = [
            try center.observe("org.example.>", on: .immediate) { rest.append("\($0.name)=\($0.payloadString ?? "")") },
            try center.observe("*.x", on: .immediate) { star.append("\($0.name)=\($0.payloadString ?? "")") },
            try center.observe("org.example.x", on: .immediate) { exact.append("\($0.name)=\($0.payloadString ?? "")") },
        ]
        try await center.synchronize()

        for name in ["org.example.x", "org.example.a.b", "a.x", "org.example", "org.x.y", "a.b.x", "org.examples.x"] {
            let receipt = try await poster.postAndWait(name, payload: Array(name.utf8))
            let matches = ["org.example.x", "org.example.a.b", "a.x"].contains(name)
            #expect(receipt.deliveredCount == (matches ? 1 : 0), "\(name): one connection however many observations match")
        }
        try await center.synchronize()
        #expect(rest.values == ["org.example.x=org.example.x", "org.example.a.b=org.example.a.b"])
        #expect(star.values == ["a.x=a.x"], "* is exactly one label: org.example.x has three")
        #expect(exact.values == ["org.example.x=org.example.x"])

        let status = try await center.daemonStatus()
        #expect(status.subscriptions == 3)
        #expect(status.patterns == 2)
        withExtendedLifetime(observations) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("receivesCurrentValue: the retained value first (isRetained), then newer ones")
    func currentValue() async throws {
        let daemon = try await TestServer.start()
        let poster = try await daemon.center()
        try await poster.postAndWait("org.example.mode", payload: Array("v1".utf8), retain: true)
        let retained = try await poster.postAndWait("org.example.mode", payload: Array("v2".utf8), retain: true)
        try await poster.postAndWait("org.example.mode", payload: Array("not retained".utf8))

        let center = try await daemon.center()
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe(
            "org.example.mode", on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
        ) { received.append($0) }
        try await center.synchronize()
        let first = try await received.wait(for: 1)
        #expect(first.count == 1)
        #expect(first[0].isRetained)
        #expect(first[0].payloadString == "v2")
        #expect(first[0].sequence == retained.sequence)
        #expect(first[0].sender.pid == UInt32(getpid()))

        let newer = try await poster.postAndWait("org.example.mode", payload: Array("v3".utf8))
        let all = try await received.wait(for: 2)
        #expect(all.count == 2)
        #expect(!all[1].isRetained && all[1].payloadString == "v3" && all[1].sequence == newer.sequence)

        // Without a retained notification, receivesCurrentValue delivers nothing up front.
        let none = Collector<ReceivedNotification>()
        let other = try center.observe(
            "org.example.unset", on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
        ) { none.append($0) }
        try await center.synchronize()
        #expect(none.values.isEmpty)
        withExtendedLifetime((observation, other)) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("receivesCurrentValue on an observation made before the center connects: it starts with the value all the same")
    func currentValueBeforeConnecting() async throws {
        let daemon = try await TestServer.start()
        let poster = try await daemon.center()
        try await poster.postAndWait("org.example.early", payload: Array("v1".utf8), retain: true)
        // The center looks for its daemon at a path that does not exist yet: it cannot connect before the observation.
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        let path = directory + "/later.sock"
        let center = NotifyCenter(
            configuration: NotifyCenter.Configuration(socketPath: path, clientName: "early", reconnect: .default))
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe(
            "org.example.early", on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
        ) { received.append($0) }
        #expect(symlink(daemon.socketPath, path) == 0, "symlink: errno \(errno)")
        try await center.waitUntilConnected(timeout: TestScale.timeout(20))
        let first = try await received.wait(for: 1, "the current value, after connecting")
        #expect(first[0].isRetained && first[0].payloadString == "v1", "\(first[0])")

        // Each connection asks again: a value retained while the center was away is not missed. Another daemon,
        // with another value, takes the path's place once the first is gone.
        let other = try await TestServer.start()
        let otherPoster = try await other.center()
        try await otherPoster.postAndWait("org.example.early", payload: Array("v2".utf8), retain: true)
        await poster.close()
        try await daemon.stop()
        #expect(symlink(other.socketPath, path + ".new") == 0 && rename(path + ".new", path) == 0, "errno \(errno)")
        let second = try await received.wait(for: 2, "the current value, after reconnecting")
        #expect(second[1].isRetained && second[1].payloadString == "v2", "\(second[1])")
        withExtendedLifetime(observation) {}
        await center.close()
        await otherPoster.close()
        try await other.stop()
    }

    @Test("an observation added to an existing subscription with receivesCurrentValue gets it; the existing one gets no duplicate")
    func currentValueForASecondObservation() async throws {
        let daemon = try await TestServer.start()
        let poster = try await daemon.center()
        try await poster.postAndWait("org.example.mode", payload: Array("dark".utf8), retain: true)
        let center = try await daemon.center()
        let existing = Collector<ReceivedNotification>()
        let added = Collector<ReceivedNotification>()
        let first = try center.observe("org.example.mode", on: .immediate) { existing.append($0) }
        try await center.synchronize()
        let second = try center.observe(
            "org.example.mode", on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
        ) { added.append($0) }
        try await center.synchronize()
        #expect(added.values.map(\.payloadString) == ["dark"])
        #expect(added.values.first?.isRetained == true)
        #expect(existing.values.isEmpty, "the existing observation must not get the current value again")

        try await poster.postAndWait("org.example.mode", payload: Array("light".utf8))
        try await center.synchronize()
        #expect(existing.values.map(\.payloadString) == ["light"])
        #expect(added.values.map(\.payloadString) == ["dark", "light"])
        #expect(existing.values.allSatisfy { !$0.isRetained })
        let status = try await center.daemonStatus()
        #expect(status.subscriptions == 1, "the probe subscription for the current value was removed again")
        withExtendedLifetime((first, second)) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("setState and state(of:): nil when unset, values round-trip across centers, invalid names are refused locally")
    func state() async throws {
        let daemon = try await TestServer.start()
        let a = try await daemon.center()
        let b = try await daemon.center()
        #expect(try await b.state(of: "org.example.level") == nil)
        try await a.setState(42, for: "org.example.level")
        #expect(try await b.state(of: "org.example.level") == 42)
        try await b.setState(0, for: "org.example.level")
        #expect(try await a.state(of: "org.example.level") == 0, "0 is a value")
        try await a.setState(.max, for: "org.example.level")
        #expect(try await b.state(of: "org.example.level") == .max)
        await #expect(throws: NotifyError.self) { try await a.setState(1, for: "org..level") }
        await #expect(throws: NotifyError.self) { _ = try await a.state(of: "org.example.>") }
        await a.close()
        await b.close()
        try await daemon.stop()
    }

    @Test("suspend/resume nest: two suspends and one resume still hold; the last resume releases, merged under coalesce")
    func suspendResume() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let poster = try await daemon.center()
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe("org.example.level", on: .immediate) { received.append($0) }
        try await center.synchronize()

        try await center.suspend()
        try await center.suspend()
        for value in 1...3 { try await poster.postAndWait("org.example.level", payload: Array("\(value)".utf8)) }
        try await center.synchronize()
        #expect(received.values.isEmpty, "suspended twice")
        try await center.resume()
        try await center.synchronize()
        #expect(received.values.isEmpty, "one resume of two: still suspended")
        let clients = try await center.daemonClients()
        #expect(clients.first { $0.pid == UInt32(getpid()) && $0.suspended } != nil)

        try await center.resume()
        let released = try await received.wait(for: 1)
        #expect(released.map(\.payloadString) == ["3"])
        #expect(released.first?.mergedCount == 2, "the latest of three, two merged into it")
        try await poster.postAndWait("org.example.level", payload: Array("4".utf8))
        let live = try await received.wait(for: 2)
        #expect(live[1].payloadString == "4" && live[1].mergedCount == 0)

        do {
            try await center.resume()
            Issue.record("resume() without suspend() must throw")
        } catch let error as NotifyError {
            guard case .rejected(let code, _) = error else {
                Issue.record("expected rejected(invalid-request), got \(error)")
                return
            }
            #expect(code == .invalidRequest)
        }
        withExtendedLifetime(observation) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("coalesce: mergedCount tells how many notifications were merged into the one delivered, per name")
    func mergedCount() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let poster = try await daemon.center()
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe("org.example.>", on: .immediate) { received.append($0) }
        try await center.synchronize()
        try await center.suspend()
        for index in 0..<5 {
            try poster.post("org.example.a", text: "a\(index)")
            try poster.post("org.example.b", text: "b\(index)")
        }
        try await poster.synchronize()
        try await center.resume()
        let values = try await received.wait(for: 2)
        #expect(values.map(\.name) == ["org.example.a", "org.example.b"])
        #expect(values.map(\.payloadString) == ["a4", "b4"])
        #expect(values.map(\.mergedCount) == [4, 4])
        #expect(values.allSatisfy { $0.droppedBefore == 0 })
        withExtendedLifetime(observation) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("queue(N): droppedBefore on the next notification and a notificationsDropped event")
    func droppedBefore() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let poster = try await daemon.center()
        let (events, eventTask) = Self.collectEvents(center)
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe(
            "org.example.queue", on: .immediate, options: ObservationOptions(policy: .queue(limit: 2))
        ) { received.append($0) }
        try await center.synchronize()
        try await center.suspend()
        for index in 0..<6 { try poster.post("org.example.queue", text: "\(index)") }
        try await poster.synchronize()
        try await center.resume()
        let values = try await received.wait(for: 2)
        #expect(values.map(\.payloadString) == ["4", "5"])
        #expect(values.map(\.droppedBefore) == [4, 0])
        #expect(values.allSatisfy { $0.mergedCount == 0 })
        @Sendable func drops() -> [ConnectionEvent] {
            events.values.filter { if case .notificationsDropped = $0 { true } else { false } }
        }
        try await waitUntil("a notificationsDropped event") { !drops().isEmpty }
        #expect(drops() == [.notificationsDropped(count: 4, pattern: "org.example.queue")])
        eventTask.cancel()
        withExtendedLifetime(observation) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("queue(N): every observation of the name learns what was dropped (droppedBefore), not only the first")
    func droppedBeforeForEachObservation() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let poster = try await daemon.center()
        let first = Collector<ReceivedNotification>()
        let second = Collector<ReceivedNotification>()
        let options = ObservationOptions(policy: .queue(limit: 2))
        let observations = [
            try center.observe("org.example.both", on: .immediate, options: options) { first.append($0) },
            try center.observe("org.example.both", on: .immediate, options: options) { second.append($0) },
        ]
        try await center.synchronize()
        try await center.suspend()
        for index in 0..<6 { try poster.post("org.example.both", text: "\(index)") }
        try await poster.synchronize()
        try await center.resume()
        #expect(try await first.wait(for: 2).map(\.droppedBefore) == [4, 0])
        #expect(try await second.wait(for: 2).map(\.droppedBefore) == [4, 0])
        withExtendedLifetime(observations) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("daemonStatus, daemonNames and daemonClients report what the clients did")
    func introspection() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let other = try await daemon.center()
        let observations = [
            try center.observe("org.example.watched", on: .immediate) { _ in },
            try center.observe("org.example.>", on: .immediate) { _ in },
            try other.observe("org.example.watched", on: .immediate) { _ in },
        ]
        try await center.synchronize()
        try await other.synchronize()
        try await other.setState(7, for: "org.example.level")
        try await other.postAndWait("org.example.mode", payload: Array("m".utf8), retain: true)
        try await other.suspend()

        let status = try await center.daemonStatus()
        #expect(status.version == NotifyServer.version)
        #expect(status.pid == UInt32(getpid()))
        #expect(status.connections == 2)
        #expect(status.subscriptions == 3)
        #expect(status.subscribedNames == 1)
        #expect(status.patterns == 1)
        #expect(status.stateNames == 1)
        #expect(status.retainedNames == 1)
        #expect(status.posts == 1)
        #expect(status.deliveries == 1)

        let names = try await center.daemonNames(matching: "org.example.*")
        #expect(
            names == [
                DaemonName(name: "org.example.level", subscribers: 0, state: 7, hasRetained: false),
                DaemonName(name: "org.example.mode", subscribers: 0, state: nil, hasRetained: true),
                DaemonName(name: "org.example.watched", subscribers: 2, state: nil, hasRetained: false),
            ])
        #expect(try await center.daemonNames(matching: "net.>").isEmpty)
        #expect(try await center.daemonNames().count == 3)

        let clients = try await center.daemonClients()
        #expect(clients.count == 2)
        #expect(clients.allSatisfy { $0.pid == UInt32(getpid()) && $0.uid == getuid() && $0.clientName == "test" })
        #expect(clients.map(\.subscriptions).sorted() == [1, 2])
        #expect(clients.map(\.suspended).sorted { !$0 && $1 } == [false, true])
        try await other.resume()
        withExtendedLifetime(observations) {}
        await center.close()
        await other.close()
        try await daemon.stop()
    }
}
