#if canImport(CoreFoundation)
import CoreFoundation
#endif
import Foundation
import NIOConcurrencyHelpers
import NotifyTestSupport
import Testing

@testable import Notify

@Suite("NotificationThread lifetime")
struct NotificationThreadLifetimeTests {
    @Test("60 observations on .thread(NotificationThread()) created inline each run their handler")
    func inlineThreadsDeliver() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let count = 60
        let received = Collector<Int>()
        let wrongThread = NIOLockedValueBox(0)
        var observations: [Observation] = []
        for index in 0..<count {
            // Written as the README shows it: nothing but the observation keeps the thread.
            observations.append(
                try center.observe("lifetime.inline", on: .thread(NotificationThread())) { _ in
                    if Thread.isMainThread { wrongThread.withLockedValue { $0 += 1 } }
                    received.append(index)
                })
        }
        try await center.synchronize()
        try center.post("lifetime.inline")
        let indices = try await received.wait(for: count, timeout: 10, "handlers of inline-thread observations")
        #expect(Set(indices) == Set(0..<count))
        #expect(wrongThread.withLockedValue { $0 } == 0)
        for observation in observations { observation.cancel() }
        await center.close()
        try await daemon.stop()
    }

    @Test("an observation keeps its NotificationThread alive; once the observation is gone, so is the thread")
    func observationOwnsThread() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let received = Collector<Bool>()
        var thread: NotificationThread? = NotificationThread(name: "owned-by-observation")
        let weakThread = WeakReference(thread!)
        var observation: Observation? = try center.observe("lifetime.owned", on: .thread(thread!)) { _ in
            received.append(true)
        }
        thread = nil
        #expect(weakThread.value != nil, "the observation must keep its thread")
        try await center.synchronize()
        try center.post("lifetime.owned")
        _ = try await received.wait(for: 1)
        observation?.cancel()
        observation = nil
        // In-flight jobs may hold the observation a moment longer; then the thread is released.
        try await waitUntil("the thread is released with its observation") { weakThread.value == nil }
        await center.close()
        try await daemon.stop()
    }

    @Test("stop() ends the thread even while its run loop sleeps")
    func stopEndsThread() async throws {
        let thread = NotificationThread(name: "stopped")
        let ran = Collector<Bool>()
        thread.schedule { ran.append(true) }
        _ = try await ran.wait(for: 1)  // now its run loop is inside run(), waiting for more
        thread.stop()
        let finished = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: thread.waitUntilFinished(timeout: TestScale.timeout(10))) }
        }
        #expect(finished, "the thread's run loop did not return after stop()")
    }

    @Test("a released NotificationThread ends its thread")
    func releaseEndsThread() async throws {
        var thread: NotificationThread? = NotificationThread(name: "released")
        let finished = try #require(thread?.finished)
        let ran = Collector<Bool>()
        thread?.schedule { ran.append(true) }
        _ = try await ran.wait(for: 1)
        thread = nil
        let ended = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: finished.wait(timeout: .now() + TestScale.timeout(10)) == .success)
            }
        }
        #expect(ended, "the thread's run loop did not return after its NotificationThread was released")
    }
}

/// A thread of the test's own running its run loop until told to stop, as an application's would.
private final class RunLoopThread: Sendable {
    let runLoop: RunLoopBox
    private let cfRunLoop: CFRunLoopBox
    private let stopped = NIOLockedValueBox(false)

    // Test-only boxes: the run loop is only used through calls CoreFoundation locks (perform, wake, stop).
    struct RunLoopBox: @unchecked Sendable { let value: RunLoop }
    struct CFRunLoopBox: @unchecked Sendable { let value: CFRunLoop }

    init() {
        let ready = DispatchSemaphore(value: 0)
        let handoff = NIOLockedValueBox<(RunLoopBox, CFRunLoopBox)?>(nil)
        let stopped = self.stopped
        let thread = Thread {
            let runLoop = RunLoop.current
            runLoop.add(Timer(fire: .distantFuture, interval: 0, repeats: false) { _ in }, forMode: .default)
            handoff.withLockedValue { $0 = (RunLoopBox(value: runLoop), CFRunLoopBox(value: CFRunLoopGetCurrent())) }
            ready.signal()
            while !stopped.withLockedValue({ $0 }) { _ = runLoop.run(mode: .default, before: .distantFuture) }
        }
        thread.start()
        ready.wait()
        (runLoop, cfRunLoop) = handoff.withLockedValue { $0! }
    }

    func stop() {
        stopped.withLockedValue { $0 = true }
        CFRunLoopStop(cfRunLoop.value)
    }
}

/// Something to hold a weak reference to.
private final class Token: Sendable {}

@Suite("Run loop targets")
struct RunLoopTargetTests {
    @Test("work handed to a sleeping run loop runs there, in order, and is released once it has run")
    func scheduledWorkIsReleased() async throws {
        let thread = RunLoopThread()
        let reference = RunLoopReference(thread.runLoop.value)
        let ran = Collector<Int>()
        var released: [WeakReference<Token>] = []
        for index in 0..<5 {
            let token = Token()
            released.append(WeakReference(token))
            reference.schedule {
                withExtendedLifetime(token) { ran.append(index) }
            }
            // One at a time: each must wake the sleeping run loop by itself.
            _ = try await ran.wait(for: index + 1, timeout: 5, "wake-ups of a sleeping run loop")
        }
        #expect(ran.values == Array(0..<5))
        let tokens = released
        try await waitUntil("the scheduled blocks are released after running") {
            tokens.allSatisfy { $0.value == nil }
        }
        thread.stop()
    }

    @Test(".runLoop(rl): handlers run on the run loop's thread, in order")
    func runLoopTarget() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let thread = RunLoopThread()
        let received = Collector<String>()
        let observation = try center.observe("targets.runloop", on: .runLoop(thread.runLoop.value)) { note in
            received.append(note.payloadString ?? "")
        }
        try await center.synchronize()
        for index in 0..<3 {
            try center.post("targets.runloop", text: "\(index)")
            _ = try await received.wait(for: index + 1, timeout: 5, "wake-ups of a sleeping run loop")
        }
        for index in 3..<200 { try center.post("targets.runloop", text: "\(index)") }
        #expect(try await received.wait(for: 200) == (0..<200).map(String.init))
        observation.cancel()
        thread.stop()
        await center.close()
        try await daemon.stop()
    }
}
