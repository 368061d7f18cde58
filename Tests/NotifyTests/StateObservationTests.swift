import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NotifyServer
import NotifyTestSupport
import Testing

@testable import Notify

/// `observeStates` (PROTOCOL.md § 6.2 states flag, § 7.14): state changes and current values reach their
/// observations on the requested target, and a reconnection keeps them.
@Suite("Observing state values", .timeLimit(.minutes(TestScale.minutes(1))))
struct StateObservationTests {
    @Test("changes by name and pattern reach the handler on its target, with the setter; posts do not")
    func changesOnTarget() async throws {
        let daemon = try await TestServer.start()
        let watcher = try await daemon.center()
        let setter = try await daemon.center()
        let target = TargetQueue(label: "states.target")
        let received = Collector<StateChange>()
        let observation = try watcher.observeStates("states.*.level", on: .queue(target.queue)) { change in
            target.check()
            received.append(change)
        }
        try await watcher.synchronize()

        try await setter.postAndWait("states.a.level", text: "a post, not a state")
        try await setter.setState(7, for: "states.a.level")
        try await setter.setState(7, for: "states.a.level")
        try await setter.setState(1, for: "states.b.level")
        try await setter.setState(2, for: "states.b.other")
        let changes = try await received.wait(for: 3, "state changes")
        let me = SenderCredentials(pid: UInt32(getpid()), uid: getuid(), gid: getgid())
        #expect(
            changes == [
                StateChange(name: "states.a.level", value: 7, sender: me, isCurrent: false),
                StateChange(name: "states.a.level", value: 7, sender: me, isCurrent: false),
                StateChange(name: "states.b.level", value: 1, sender: me, isCurrent: false),
            ])
        #expect(target.offTargetCount == 0, "every handler ran on the requested queue")
        try await watcher.synchronize()
        #expect(received.values.count == 3, "no notification, no state of another name")
        withExtendedLifetime(observation) {}
        await watcher.close()
        await setter.close()
        try await daemon.stop()
    }

    @Test("sendingCurrent: the current values first, sorted by name; a second observation of the pattern gets its own")
    func currentValues() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        try await center.setState(2, for: "current.b")
        try await center.setState(1, for: "current.a")

        let first = Collector<StateChange>()
        let withCurrent = try center.observeStates("current.*", on: .immediate) { first.append($0) }
        let none = Collector<StateChange>()
        let withoutCurrent = try center.observeStates("current.*", sendingCurrent: false, on: .immediate) { none.append($0) }
        let second = Collector<StateChange>()
        let alsoCurrent = try center.observeStates("current.*", on: .immediate) { second.append($0) }
        try await center.synchronize()
        let expected = [
            StateChange(name: "current.a", value: 1, sender: nil, isCurrent: true),
            StateChange(name: "current.b", value: 2, sender: nil, isCurrent: true),
        ]
        #expect(first.values == expected)
        #expect(second.values == expected, "a later observation of a shared subscription gets the values too")
        #expect(none.values.isEmpty)

        try await center.setState(3, for: "current.a")
        #expect(try await first.wait(for: 3).last == StateChange(
            name: "current.a", value: 3, sender: SenderCredentials(pid: UInt32(getpid()), uid: getuid(), gid: getgid()),
            isCurrent: false))
        #expect(try await none.wait(for: 1).map(\.value) == [3])
        #expect(try await second.wait(for: 3).count == 3, "the values once, then the change once")
        #expect(try await daemon.status().subscriptions == 1, "one daemon subscription for the three (the probe is gone)")

        withExtendedLifetime((withCurrent, withoutCurrent, alsoCurrent)) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("cancelling the last observation of a pattern unsubscribes; an observation of notifications is apart")
    func cancelUnsubscribes() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let states = Collector<StateChange>()
        let notifications = Collector<String>()
        let stateObservation = try center.observeStates("cancel.x", on: .immediate) { states.append($0) }
        let notificationObservation = try center.observe("cancel.x", on: .immediate) {
            notifications.append($0.payloadString ?? "")
        }
        try await center.synchronize()
        #expect(try await daemon.status().subscriptions == 2, "the same name, two daemon subscriptions")

        try await center.setState(1, for: "cancel.x")
        try await center.postAndWait("cancel.x", text: "posted")
        #expect(try await states.wait(for: 1).map(\.value) == [1])
        #expect(try await notifications.wait(for: 1) == ["posted"])

        stateObservation.cancel()
        try await center.synchronize()
        #expect(try await daemon.status().subscriptions == 1)
        try await center.setState(2, for: "cancel.x")
        try await center.synchronize()
        #expect(states.values.count == 1, "nothing after cancel()")
        #expect(throws: NotifyError.self) { try center.observeStates("self.local") { _ in } }
        withExtendedLifetime(notificationObservation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("a state observation survives a daemon restart: resubscribed with the states flag, current values again")
    func survivesRestart() async throws {
        let first = try await TestServer.start()
        let path = first.socketPath
        let center = try await first.center(
            reconnect: NotifyCenter.ReconnectPolicy(initialDelay: 0.02, maximumDelay: 0.1))
        let events = center.connectionEvents()
        let received = Collector<StateChange>()
        let observation = try center.observeStates("restart.*", on: .immediate) { received.append($0) }
        try await center.synchronize()
        try await first.stop()

        // The next daemon gets its value before the center can reach it: it listens elsewhere first, and its
        // socket is moved into place only then, so the replayed SUBSCRIBE must be the one to send the value.
        let second = try await TestServer.start(socketPath: path + ".next")
        let setter = try await second.center()
        try await setter.setState(5, for: "restart.a")
        guard rename(path + ".next", path) == 0 else { throw TestFailure("rename failed: errno \(errno)") }
        try await withTimeout(10, "reconnected") {
            for await event in events { if case .connected = event { return } }
        }
        #expect(try await received.wait(for: 1) == [StateChange(name: "restart.a", value: 5, sender: nil, isCurrent: true)])

        try await center.synchronize()
        try await setter.setState(6, for: "restart.b")
        #expect(try await received.wait(for: 2).last?.value == 6, "changes flow again")
        #expect(received.values.last?.isCurrent == false)
        withExtendedLifetime(observation) {}
        await center.close()
        await setter.close()
        try await second.stop()
    }
}
