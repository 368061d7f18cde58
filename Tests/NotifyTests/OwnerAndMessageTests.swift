import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NotifyTestSupport
import Testing

@testable import Notify

final class Owner: Sendable {
    let label: String
    let deinitialized: Collector<String>?
    init(_ label: String, deinitialized: Collector<String>? = nil) {
        self.label = label
        self.deinitialized = deinitialized
    }
    deinit { deinitialized?.append(label) }
}

struct BatteryLevel: NotifyMessage, Equatable {
    static let name = "test.typed.battery"
    var percent: Int
    var charging: Bool
    var at: Date
}

struct ImpostorMessage: NotifyMessage {
    static let name = "test.typed.battery"
    var anything: String
}

@Suite("Owner-bound observations")
struct OwnerTests {
    @Test("the handler gets the owner; observing again for the same owner and name replaces the observation")
    func ownerAndReplacement() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let owner = Owner("a")
        let first = Collector<String>()
        let second = Collector<String>()
        center.observeOwned(owner, "owner.replace", into: first, tag: "first")
        center.observeOwned(owner, "owner.replace", into: second, tag: "second")
        try await center.synchronize()
        try await center.postAndWait("owner.replace")
        #expect(try await second.wait(for: 1) == ["second:a"])
        try await center.synchronize()
        try await drain()
        #expect(first.values.isEmpty, "the replaced observation must not run")
        #expect(center.owners.count == 1)
        await center.close()
        try await daemon.stop()
    }

    @Test("when the owner is released, no handler runs and the daemon subscription goes away")
    func ownerReleased() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let received = Collector<String>()
        let gone = Collector<String>()
        do {
            let owner = Owner("short-lived", deinitialized: gone)
            center.observeOwned(owner, "owner.released", into: received, tag: "h")
            try await center.synchronize()
            try await center.postAndWait("owner.released")
            _ = try await received.wait(for: 1)
        }
        #expect(try await gone.wait(for: 1) == ["short-lived"], "the center must not keep the owner alive")
        try await center.postAndWait("owner.released")
        try await waitUntil("the released owner's subscription is dropped") {
            (await daemon.server.snapshot()?.clients.reduce(0) { $0 + $1.subscriptions }) == 0
        }
        #expect(received.values.count == 1)
        #expect(center.owners.count == 0)
        await center.close()
        try await daemon.stop()
    }

    @Test("removeObservers(owner:) and removeObservers(owner:name:)")
    func removeObservers() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let owner = Owner("o")
        let other = Owner("p")
        let received = Collector<String>()
        center.observeOwned(owner, "owner.one", into: received, tag: "one")
        center.observeOwned(owner, "owner.two", into: received, tag: "two")
        center.observeOwned(other, "owner.one", into: received, tag: "other")
        try await center.synchronize()
        center.removeObservers(owner: owner, name: "owner.one")
        try await center.postAndWait("owner.one")
        try await center.postAndWait("owner.two")
        var values = try await received.wait(for: 2)
        #expect(Set(values) == ["other:p", "two:o"])
        center.removeObservers(owner: owner)
        try await center.postAndWait("owner.two")
        try await center.postAndWait("owner.one")
        values = try await received.wait(for: 3)
        try await drain()
        #expect(received.values.count == 3 && values.last == "other:p")
        withExtendedLifetime((owner, other)) {}
        await center.close()
        try await daemon.stop()
    }

    /// Lets queued deliveries on the owner tests' queue run.
    private func drain() async throws {
        await withCheckedContinuation { continuation in ownerQueue.async { continuation.resume() } }
    }
}

let ownerQueue = DispatchQueue(label: "owner-tests")

extension NotifyCenter {
    func observeOwned(_ owner: Owner, _ name: String, into collector: Collector<String>, tag: String) {
        _ = try? observe(name, owner: owner, on: .queue(ownerQueue)) { owner, _ in
            collector.append("\(tag):\(owner.label)")
        }
    }
}

@Suite("Typed messages")
struct TypedMessageTests {
    @Test("a typed message round-trips between centers; its payload is sorted-key JSON with ISO 8601 dates")
    func roundTrip() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let poster = try await daemon.center()
        let typed = Collector<BatteryLevel>()
        let raw = Collector<String>()
        let a = try observer.observe(BatteryLevel.self, on: .immediate) { typed.append($0) }
        let b = try observer.observe(BatteryLevel.name, on: .immediate) { raw.append($0.payloadString ?? "") }
        try await observer.synchronize()
        let message = BatteryLevel(percent: 42, charging: true, at: Date(timeIntervalSince1970: 1_800_000_000))
        try await poster.postAndWait(message)
        #expect(try await typed.wait(for: 1) == [message])
        #expect(try await raw.wait(for: 1) == [#"{"at":"2027-01-15T08:00:00Z","charging":true,"percent":42}"#])
        withExtendedLifetime((a, b)) {}
        await observer.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("a payload that does not decode is reported to the failure handler and as an event, never dropped silently")
    func malformedPayload() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let events = center.connectionEvents()
        let typed = Collector<BatteryLevel>()
        let failures = Collector<MessageDecodingError>()
        let observation = try center.observe(
            BatteryLevel.self, on: .immediate, onDecodingFailure: { failures.append($0) }
        ) { typed.append($0) }
        try await center.synchronize()
        try center.post(BatteryLevel.name, text: #"{"percent":"lots"}"#)
        let failure = try await failures.wait(for: 1)[0]
        #expect(failure.typeName.hasSuffix("BatteryLevel"))
        #expect(failure.reason.contains("percent"), "the reason names the field: \(failure.reason)")
        #expect(failure.notification.sender.pid == UInt32(getpid()))
        let event = try await nextEvent(events)
        guard case .messageDecodingFailed(let reported) = event else {
            Issue.record("expected a decoding-failure event, got \(String(describing: event))")
            return
        }
        #expect(reported.reason == failure.reason)
        #expect(typed.values.isEmpty)
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("two message types cannot claim the same name in one process")
    func nameConflict() async throws {
        let center = NotifyCenter(configuration: .init(socketPath: TestServer.makeSocketPath(), reconnect: .never))
        _ = try center.observe(BatteryLevel.self, on: .immediate) { _ in }
        do {
            _ = try center.observe(ImpostorMessage.self, on: .immediate) { _ in }
            Issue.record("a second type took the name")
        } catch NotifyError.messageNameConflict(let name, let type) {
            #expect(name == BatteryLevel.name && type.hasSuffix("ImpostorMessage"))
        }
        #expect(throws: NotifyError.self) { try center.post(ImpostorMessage(anything: "x")) }
        await center.close()
    }
}

@Suite("Posting while disconnected")
struct DisconnectedPostingTests {
    @Test("with .wait, posts made while no daemon is reachable are sent, in order, once it is")
    func heldPostsAreSent() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let received = Collector<String>()
        let observation = try observer.observe("held.posts", on: .immediate) { received.append($0.payloadString ?? "") }
        try await observer.synchronize()

        // The poster looks for the daemon at a path that does not exist yet.
        let link = (daemon.socketPath as NSString).deletingLastPathComponent + "/link.sock"
        let poster = NotifyCenter(
            configuration: .init(
                socketPath: link, reconnect: .init(initialDelay: 0.02, maximumDelay: 0.05),
                whileDisconnected: .wait(timeout: 30)))
        for index in 0..<10 { try poster.post("held.posts", text: "\(index)") }
        #expect(symlink(daemon.socketPath, link) == 0)
        #expect(try await received.wait(for: 10) == (0..<10).map(String.init))
        withExtendedLifetime(observation) {}
        await observer.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("held posts that outlive their timeout are reported as expired")
    func heldPostsExpire() async throws {
        let poster = NotifyCenter(
            configuration: .init(socketPath: TestServer.makeSocketPath(), whileDisconnected: .wait(timeout: 0.05)))
        let events = poster.connectionEvents()
        try poster.post("held.expire")
        try poster.post("held.expire")
        // Each post has its own deadline; the expiry reports what is due when its timer fires, so the two may
        // come in one event or in two (the second post's deadline can be a little later). Both, and no more.
        var expired = 0
        while expired < 2 {
            guard let event = try await nextEvent(events) else {
                Issue.record("the event stream ended after \(expired) expired post(s)")
                break
            }
            switch event {
            case .disconnected: continue
            case .postsExpired(let count): expired += count
            default: Issue.record("unexpected event \(event)")
            }
        }
        #expect(expired == 2)
        await poster.close()
    }

    @Test("with .fail (the default), posting while disconnected throws at once")
    func failFast() async throws {
        let center = NotifyCenter(configuration: .init(socketPath: TestServer.makeSocketPath()))
        #expect(throws: NotifyError.self) { try center.post("x.y") }
        await #expect(throws: NotifyError.self) { try await center.synchronize() }
        await center.close()
    }
}
