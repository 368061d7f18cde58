import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NotifyServer
import NotifyTestSupport
import Testing

@testable import Notify

/// `ObservationOptions.marksRetainedPosts` (PROTOCOL.md § 6.2 marks-retained flag, § 9.5): observations that ask
/// are told which posts were made with retain; and the origin of a relayed retained notification is reported.
@Suite("Marking retained posts", .timeLimit(.minutes(TestScale.minutes(1))))
struct RetainedPostMarkingTests {
    @Test("isRetainedPost is true for posts made with retain, false for others, on the requested target; unmarked observations see false")
    func marksOnTarget() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let poster = try await daemon.center()
        let target = TargetQueue(label: "marks.target")
        let marked = Collector<ReceivedNotification>()
        let marking = try center.observe("marks.>", on: .queue(target.queue), options: ObservationOptions(marksRetainedPosts: true)) {
            target.check()
            marked.append($0)
        }
        let plain = Collector<ReceivedNotification>()
        let unmarked = try center.observe("marks.a", on: .immediate) { plain.append($0) }
        try await center.synchronize()
        #expect(try await daemon.status().subscriptions == 2)

        try await poster.postAndWait("marks.a", text: "plain")
        try await poster.postAndWait("marks.a", text: "kept", retain: true)
        try await poster.postAndWait("marks.b", text: "plain b")
        let got = try await marked.wait(for: 3, "marked observation")
        #expect(got.map(\.payloadString) == ["plain", "kept", "plain b"])
        #expect(got.map(\.isRetainedPost) == [false, true, false])
        #expect(got.allSatisfy { !$0.isRetained }, "isRetained stays about current values")
        #expect(got[0].sequence < got[1].sequence && got[1].sequence < got[2].sequence)
        let other = try await plain.wait(for: 2, "unmarked observation")
        #expect(other.map(\.payloadString) == ["plain", "kept"])
        #expect(other.allSatisfy { !$0.isRetainedPost }, "only reported where asked for")
        #expect(target.offTargetCount == 0, "every handler ran on the requested queue")
        try await center.synchronize()
        #expect(marked.values.count == 3 && plain.values.count == 2, "each post once")
        withExtendedLifetime((marking, unmarked)) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("marksRetainedPosts survives a daemon restart: the subscription is made again with the flag")
    func survivesRestart() async throws {
        let first = try await TestServer.start()
        let path = first.socketPath
        let center = try await first.center(
            reconnect: NotifyCenter.ReconnectPolicy(initialDelay: 0.02, maximumDelay: 0.1))
        let events = center.connectionEvents()
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe(
            "restart.>", on: .immediate, options: ObservationOptions(marksRetainedPosts: true)
        ) { received.append($0) }
        try await center.synchronize()
        try await first.stop()

        let second = try await TestServer.start(socketPath: path)
        try await withTimeout(10, "reconnected") {
            for await event in events { if case .connected = event { return } }
        }
        try await center.synchronize()
        let poster = try await second.center()
        try await poster.postAndWait("restart.a", text: "kept", retain: true)
        try await poster.postAndWait("restart.a", text: "plain")
        let got = try await received.wait(for: 2, "after the restart")
        #expect(got.map(\.isRetainedPost) == [true, false], "\(got.map(\.payloadString))")
        withExtendedLifetime(observation) {}
        await center.close()
        await poster.close()
        try await second.stop()
    }

    @Test("the origin of a relayed retained notification: reported with the current value and with the marked post")
    func originOfRetained() async throws {
        let daemon = try await TestServer.start()
        let relay = try await daemon.center()
        let center = try await daemon.center()
        let origin = NotificationOrigin(host: "web-1", uid: 1_000, gid: 100, pid: 4_242, sequence: 77)
        let marked = Collector<ReceivedNotification>()
        let marking = try center.observe(
            "relayed.config", on: .immediate, options: ObservationOptions(marksRetainedPosts: true)
        ) { marked.append($0) }
        try await center.synchronize()

        try relay.post("relayed.config", payload: Array("v2".utf8), retain: true, origin: origin)
        try await relay.synchronize()
        let post = try #require(try await marked.wait(for: 1, "marked post").first)
        #expect(post.isRetainedPost && post.origin == origin && post.payloadString == "v2")

        let current = Collector<ReceivedNotification>()
        let late = try center.observe(
            "relayed.config", on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
        ) { current.append($0) }
        try await center.synchronize()
        let value = try #require(try await current.wait(for: 1, "current value").first)
        #expect(value.isRetained && !value.isRetainedPost, "a current value, not a marked post")
        #expect(value.origin == origin, "the store kept the relay's origin")
        withExtendedLifetime((marking, late)) {}
        await center.close()
        await relay.close()
        try await daemon.stop()
    }
}
