import Dispatch
import Foundation
import NotifyServer
import NotifyTestSupport
import Testing

@testable import Notify

/// A handler slower than the posters: the center stops reading past its pending-delivery limit, so the daemon's
/// policies decide what waits (not the process's memory).
@Suite("handler backlog", .timeLimit(.minutes(TestScale.minutes(2))))
struct HandlerBacklogTests {
    /// Posts in each test: four times what the limits below, the socket's buffers and one read (1 MiB) let wait
    /// anywhere, so that a center that kept reading would hand every one of them to the handler. Kilobyte payloads
    /// keep the count (and the time under ThreadSanitizer) small.
    static let posts = 6_000
    static let payload = String(repeating: "x", count: 1_000)

    /// A daemon with small outbound queues (room for the `queue(limit: 100)` subscription's 100 held), and a center
    /// whose handlers may lag by 64 KiB.
    static func start() async throws -> (TestServer, NotifyCenter, NotifyCenter) {
        let daemon = try await TestServer.start { $0.outboundByteLimit = 256 * 1024 }
        var configuration = NotifyCenter.Configuration(socketPath: daemon.socketPath, clientName: "slow")
        configuration.pendingDeliveryLimit = 64 * 1024
        let center = try await NotifyCenter.connect(configuration: configuration)
        return (daemon, center, try await daemon.center())
    }

    @Test("coalesce takes effect for a handler that blocks: the daemon merges what it could not send")
    func coalesceWhileTheHandlerBlocks() async throws {
        let (daemon, center, poster) = try await Self.start()
        let gate = DispatchSemaphore(value: 0)
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe("backlog.coalesce", on: .queue(DispatchQueue(label: "slow"))) {
            if received.values.isEmpty { gate.wait() }  // the first one blocks until the posts are in
            received.append($0)
        }
        try await center.synchronize()
        try poster.post("backlog.coalesce", text: "first")
        try await waitUntil("the handler to block on its first notification") { center.core.backlog.pendingBytes > 0 }
        for index in 0..<Self.posts { try poster.post("backlog.coalesce", text: "\(index) \(Self.payload)") }
        try poster.post("backlog.coalesce", text: "last")
        try await poster.synchronize()
        #expect(center.core.backlog.pauseCount > 0, "the center never paused reading")
        #expect(
            center.core.backlog.pendingBytes < 4 << 20,
            "\(center.core.backlog.pendingBytes) bytes wait for the handler (limit 64 KiB, plus at most a read)")
        gate.signal()
        try await waitUntil("the last notification") { received.values.last?.payloadString == "last" }
        let values = received.values
        #expect(values.count < Self.posts / 2, "\(values.count) of \(Self.posts + 2) delivered: nothing was coalesced")
        #expect(values.last?.mergedCount ?? 0 > 0, "the last notification should carry what was merged into it")
        withExtendedLifetime(observation) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("queue(limit:) takes effect for a handler that blocks: the oldest are dropped and counted")
    func queueLimitWhileTheHandlerBlocks() async throws {
        let (daemon, center, poster) = try await Self.start()
        let gate = DispatchSemaphore(value: 0)
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe(
            "backlog.queue", on: .queue(DispatchQueue(label: "slow")), options: ObservationOptions(policy: .queue(limit: 100))
        ) {
            if received.values.isEmpty { gate.wait() }
            received.append($0)
        }
        try await center.synchronize()
        try poster.post("backlog.queue", text: "first")
        try await waitUntil("the handler to block on its first notification") { center.core.backlog.pendingBytes > 0 }
        for index in 0..<Self.posts { try poster.post("backlog.queue", text: "\(index) \(Self.payload)") }
        try poster.post("backlog.queue", text: "last")
        try await poster.synchronize()
        gate.signal()
        try await waitUntil("the last notification") { received.values.last?.payloadString == "last" }
        let values = received.values
        let dropped = values.reduce(0) { $0 + Int($1.droppedBefore) }
        #expect(values.count < Self.posts / 2, "\(values.count) of \(Self.posts + 2) delivered: nothing was dropped")
        // What the subscription's limit dropped is reported on the next one delivered (the daemon's per-connection
        // bound may drop more, reported as the connection's).
        #expect(dropped > 0, "nothing delivered says that notifications were dropped")
        withExtendedLifetime(observation) {}
        await center.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("a cancelled observation whose jobs never run gives its share back: reading does not stay paused")
    func cancelledObservationReleasesItsShare() async throws {
        let backlog = DeliveryBacklog(limit: 1_000)
        // An executor that never runs what it is given (a run loop that stopped).
        struct Never: DeliveryExecutor { func enqueue(_ job: @escaping @Sendable () -> Void) {} }
        let core = ObservationCore(
            id: 1, name: "backlog.never", key: SubscriptionKey(pattern: "backlog.never", policy: .coalesce),
            stagingSlot: 0, executor: Never(), backlog: backlog, handler: { _ in })
        for _ in 0..<20 {
            core.deliver(ReceivedNotification(name: "backlog.never", payload: [1, 2, 3], sequence: 1, sender: .init(pid: 1, uid: 0, gid: 0)))
        }
        #expect(backlog.pauseIfFull(), "20 notifications of 131 bytes are past a limit of 1,000")
        let resumed = Collector<Int>()
        backlog.setResumer(owner: ObjectIdentifier(core)) { resumed.append(1) }
        #expect(core.cancel())
        #expect(backlog.pendingBytes == 0)
        _ = try await resumed.wait(for: 1, "the resume once the cancelled observation's share is given back")
        core.deliver(ReceivedNotification(name: "backlog.never", payload: [1], sequence: 2, sender: .init(pid: 1, uid: 0, gid: 0)))
        #expect(backlog.pendingBytes == 0, "a cancelled observation is no longer charged")
    }
}
