import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NotifyTestSupport
import Testing

@testable import Notify

actor Recorder {
    var payloads: [String] = []
    func record(_ payload: String) { payloads.append(payload) }

    /// Observes with the default target from inside the actor: the handler must run isolated to this actor.
    func observe(_ center: NotifyCenter, _ name: String, into collector: Collector<String>) throws -> Observation {
        try center.observe(name) { notification in
            self.assertIsolated("handler of .current inside an actor must run on that actor")
            collector.append(notification.payloadString ?? "")
        }
    }
}

// Serialized: the eight-target flood fills the cooperative thread pool with actor hops, which would starve the
// other actor tests of this suite if they ran beside it.
@Suite("Delivery targets", .serialized)
struct DeliveryTargetTests {
    @Test("operationQueue: OperationQueue.current is the queue, order kept even on a concurrent queue")
    func operationQueueTarget() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        let received = Collector<String>()
        let wrongQueue = NIOLockedValueBox(0)
        let observation = try center.observe("targets.opqueue", on: .operationQueue(queue)) { notification in
            if OperationQueue.current !== queue { wrongQueue.withLockedValue { $0 += 1 } }
            received.append(notification.payloadString ?? "")
        }
        try await center.synchronize()
        for index in 0..<500 { try center.post("targets.opqueue", text: "\(index)") }
        #expect(try await received.wait(for: 500) == (0..<500).map(String.init))
        #expect(wrongQueue.withLockedValue { $0 } == 0)
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("thread: a NotificationThread runs the handler on its own thread, promptly and in order")
    func notificationThreadTarget() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let thread = NotificationThread(name: "test-notification-thread")
        let received = Collector<String>()
        let wrongThread = NIOLockedValueBox(0)
        let observation = try center.observe("targets.thread", on: .thread(thread)) { notification in
            if !thread.isCurrent || Thread.isMainThread {
                wrongThread.withLockedValue { $0 += 1 }
            }
            received.append(notification.payloadString ?? "")
        }
        try await center.synchronize()
        // One at a time with a wait in between: each must wake the sleeping run loop by itself.
        for index in 0..<5 {
            try center.post("targets.thread", text: "\(index)")
            _ = try await received.wait(for: index + 1, timeout: 5, "wake-ups of a sleeping run loop")
        }
        for index in 5..<300 { try center.post("targets.thread", text: "\(index)") }
        #expect(try await received.wait(for: 300) == (0..<300).map(String.init))
        #expect(wrongThread.withLockedValue { $0 } == 0)
        observation.cancel()
        thread.stop()
        await center.close()
        try await daemon.stop()
    }

    @Test("actor: the handler runs isolated to the given actor")
    func actorTarget() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let recorder = Recorder()
        let received = Collector<String>()
        let observation = try center.observe("targets.actor", on: .actor(recorder)) { notification in
            recorder.assertIsolated()
            received.append(notification.payloadString ?? "")
        }
        try await center.synchronize()
        for index in 0..<300 { try center.post("targets.actor", text: "\(index)") }
        #expect(try await received.wait(for: 300) == (0..<300).map(String.init))
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("current inside an actor: the handler runs isolated to that actor")
    func currentInsideActor() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let recorder = Recorder()
        let received = Collector<String>()
        let observation = try await recorder.observe(center, "targets.current-actor", into: received)
        try await center.synchronize()
        for index in 0..<100 { try center.post("targets.current-actor", text: "\(index)") }
        #expect(try await received.wait(for: 100) == (0..<100).map(String.init))
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("mainActor, and current on the main actor: the handler runs isolated to the main actor")
    @MainActor
    func mainActorTargets() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let explicit = Collector<String>()
        let implicit = Collector<String>()
        let a = try center.observe("targets.main", on: .mainActor) { notification in
            MainActor.assertIsolated()
            explicit.append(notification.payloadString ?? "")
        }
        // The caller is on the main actor: `.current` resolves to it.
        let b = try center.observe("targets.main") { notification in
            MainActor.assertIsolated()
            implicit.append(notification.payloadString ?? "")
        }
        try await center.synchronize()
        for index in 0..<100 { try center.post("targets.main", text: "\(index)") }
        #expect(try await explicit.wait(for: 100) == (0..<100).map(String.init))
        #expect(try await implicit.wait(for: 100) == (0..<100).map(String.init))
        withExtendedLifetime((a, b)) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("current inside an operation queue: operations on that queue")
    func currentInsideOperationQueue() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let queue = OperationQueue()
        let received = Collector<Bool>()
        let made = Collector<Observation?>()
        queue.addOperation {
            made.append(
                try? center.observe("targets.current-opqueue") { _ in
                    received.append(OperationQueue.current === queue)
                })
        }
        let observation = try #require(try await made.wait(for: 1)[0])
        try await center.synchronize()
        for _ in 0..<20 { try center.post("targets.current-opqueue") }
        #expect(try await received.wait(for: 20).allSatisfy { $0 })
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("current anywhere else: a private serial queue, never the I/O thread, in order")
    func currentElsewhere() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let received = Collector<String>()
        let onIOThread = NIOLockedValueBox(0)
        let observation = try await Task.detached {
            try center.observe("targets.current-private") { notification in
                if Thread.current.name?.contains("NIO") == true { onIOThread.withLockedValue { $0 += 1 } }
                received.append(notification.payloadString ?? "")
            }
        }.value
        try await center.synchronize()
        for index in 0..<300 { try center.post("targets.current-private", text: "\(index)") }
        #expect(try await received.wait(for: 300) == (0..<300).map(String.init))
        #expect(onIOThread.withLockedValue { $0 } == 0)
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("100,000 notifications (10,000 under ThreadSanitizer) to 8 observations with different targets: each in daemon order, none lost")
    func eightTargetsInOrder() async throws {
        let daemon = try await TestServer.start()
        let observerCenter = try await daemon.center()
        let poster = try await daemon.center()
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 3
        let thread = NotificationThread(name: "eight-targets")
        let targets: [(String, DeliveryTarget)] = [
            ("serial queue", .queue(DispatchQueue(label: "eight.serial"))),
            ("concurrent queue", .queue(DispatchQueue(label: "eight.concurrent", attributes: .concurrent))),
            ("operation queue", .operationQueue(operationQueue)),
            ("notification thread", .thread(thread)),
            ("actor", .actor(Recorder())),
            ("main actor", .mainActor),
            ("immediate", .immediate),
            ("private queue", .current),
        ]
        let total = TestScale.count(100_000)
        let collectors = targets.map { _ in Collector<UInt64>() }
        var observations: [Observation] = []
        for (index, (_, target)) in targets.enumerated() {
            let collector = collectors[index]
            observations.append(
                try await Task.detached {
                    try observerCenter.observe("eight.targets", on: target) { collector.append($0.sequence) }
                }.value)
        }
        try await observerCenter.synchronize()
        for _ in 0..<total { try poster.post("eight.targets") }
        try await poster.synchronize()
        for (index, (label, _)) in targets.enumerated() {
            let sequences = try await collectors[index].wait(for: total, timeout: 120, "deliveries to \(label)")
            #expect(sequences.count == total, "\(label) received \(sequences.count)")
            #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $0 + 1 == $1 }, "\(label) out of order or lost")
        }
        withExtendedLifetime(observations) {}
        thread.stop()
        await observerCenter.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test(".immediate: a handler delivered from two threads at once (two posters of a self. name) runs one at a time")
    func immediateHandlerNeverOverlaps() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let inside = NIOLockedValueBox((now: 0, most: 0, calls: 0))
        let firstStarted = DispatchSemaphore(value: 0)
        let releaseFirst = DispatchSemaphore(value: 0)
        let observation = try center.observe("self.overlap", on: .immediate) { _ in
            let call = inside.withLockedValue { state -> Int in
                state.now += 1
                state.most = max(state.most, state.now)
                state.calls += 1
                return state.calls
            }
            if call == 1 {
                firstStarted.signal()
                _ = releaseFirst.wait(timeout: .now() + 20)
            }
            inside.withLockedValue { $0.now -= 1 }
        }
        let posted = Collector<Int>()
        Thread { try? center.post("self.overlap"); posted.append(1) }.start()
        #expect(firstStarted.wait(timeout: .now() + TestScale.timeout(10)) == .success, "the first invocation never started")
        Thread { try? center.post("self.overlap"); posted.append(2) }.start()
        // The second poster either waits at the gate (right) or runs the handler alongside the first (the bug).
        try await waitUntil("the second delivery to wait or to run") {
            observation.core.threadsWaitingForHandler == 1 || inside.withLockedValue { $0.most } > 1
        }
        releaseFirst.signal()
        _ = try await posted.wait(for: 2, "both posts")
        #expect(inside.withLockedValue { $0.most } == 1, "two invocations of one .immediate handler overlapped")
        #expect(inside.withLockedValue { $0.calls } == 2)
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("a handler that blocks does not delay another observation's handler")
    func blockedHandlerIsolation() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let release = DispatchSemaphore(value: 0)
        let slowStarted = Collector<Int>()
        let fast = Collector<Int>()
        let slowObservation = try center.observe("isolation.test", on: .queue(DispatchQueue(label: "slow"))) { _ in
            slowStarted.append(1)
            // Blocks until the fast observation has everything (or 10 s pass, which fails the test below).
            _ = release.wait(timeout: .now() + 10)
        }
        let fastObservation = try center.observe("isolation.test", on: .queue(DispatchQueue(label: "fast"))) { _ in
            fast.append(1)
        }
        try await center.synchronize()
        for _ in 0..<50 { try center.post("isolation.test") }
        _ = try await slowStarted.wait(for: 1)
        // While the slow handler is blocked, the fast one receives all 50.
        let fastCount = try await fast.wait(for: 50, timeout: 5, "fast deliveries while another handler blocks").count
        #expect(fastCount == 50)
        #expect(slowStarted.values.count == 1, "the slow observation is still inside its first handler")
        for _ in 0..<50 { release.signal() }
        _ = try await slowStarted.wait(for: 50)
        withExtendedLifetime((slowObservation, fastObservation)) {}
        await center.close()
        try await daemon.stop()
    }
}
