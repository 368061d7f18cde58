import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NotifyTestSupport
import NotifyWire
import Testing

@testable import Notify

/// Notifications read in one burst reach each observation as one job (benchmark finding F4); these tests pin
/// what users can rely on regardless: completeness, order, cancellation, and the ordering with `synchronize()`
/// and with a lost connection.
@Suite("Batched delivery")
struct BatchedDeliveryTests {
    @Test("a burst reaches a queue, an operation-queue and an immediate observation complete and in order")
    func burstCompleteAndOrdered() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let poster = try await daemon.center()
        let count = TestScale.count(5_000)
        let queue = DispatchQueue(label: "batched.queue")
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 3
        let onQueue = Collector<String>()
        let onOperationQueue = Collector<String>()
        let immediate = Collector<String>()
        let wrongContext = NIOLockedValueBox(0)
        let a = try center.observe("batched.burst", on: .queue(queue)) { notification in
            if DispatchQueue.getSpecific(key: Self.queueKey) != "batched.queue" { wrongContext.withLockedValue { $0 += 1 } }
            onQueue.append(notification.payloadString ?? "")
        }
        queue.setSpecific(key: Self.queueKey, value: "batched.queue")
        let b = try center.observe("batched.burst", on: .operationQueue(operationQueue)) { notification in
            if OperationQueue.current !== operationQueue { wrongContext.withLockedValue { $0 += 1 } }
            onOperationQueue.append(notification.payloadString ?? "")
        }
        let c = try center.observe("batched.burst", on: .immediate) { notification in
            immediate.append(notification.payloadString ?? "")
        }
        try await center.synchronize()
        // Posted from another connection without waiting, so the daemon's writes reach the observer in bursts.
        for index in 0..<count { try poster.post("batched.burst", text: "\(index)") }
        let expected = (0..<count).map(String.init)
        #expect(try await onQueue.wait(for: count, "notifications on the queue") == expected)
        #expect(try await onOperationQueue.wait(for: count, "notifications on the operation queue") == expected)
        #expect(try await immediate.wait(for: count, "immediate notifications") == expected)
        #expect(wrongContext.withLockedValue { $0 } == 0)
        withExtendedLifetime((a, b, c)) {}
        await poster.close()
        await center.close()
        try await daemon.stop()
    }

    @Test("when synchronize() returns, notifications read before its answer were handed to their executors")
    func synchronizeOrdersAfterNotifications() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let count = TestScale.count(1_000)
        let queue = DispatchQueue(label: "batched.synchronize")
        let received = Collector<Int>()
        let observation = try center.observe("batched.sync", on: .queue(queue)) { _ in received.append(1) }
        try await center.synchronize()
        for _ in 0..<count { try center.post("batched.sync") }
        // The daemon queues this center's own notifications before it answers the barrier on the same
        // connection, so once it returns they have all reached the queue, ahead of this block.
        try await center.synchronize()
        let ran = await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: received.values.count) }
        }
        #expect(ran == count)
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("cancelling an observation while its batch runs: no handler starts after cancel() returns")
    func cancelMidBatch() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let count = TestScale.count(1_000)
        let queue = DispatchQueue(label: "batched.cancel")
        let box = NIOLockedValueBox<Observation?>(nil)
        let started = Collector<Int>()
        let cancelReturned = NIOLockedValueBox(false)
        let lateInvocations = NIOLockedValueBox(0)
        let gaveUpWaiting = NIOLockedValueBox(false)
        // Signalled by the test once another thread's cancel() has closed the gate.
        let gateClosed = DispatchSemaphore(value: 0)
        let observation = try center.observe("batched.cancel", on: .queue(queue)) { _ in
            if cancelReturned.withLockedValue({ $0 }) { lateInvocations.withLockedValue { $0 += 1 } }
            started.append(1)
            // Hold the first invocation (and so the rest of its batch) until another thread's cancel() has
            // closed the gate; that cancel() waits for this invocation to finish before it returns.
            guard box.withLockedValue({ $0 })?.isCancelled != true else { return }
            if gateClosed.wait(timeout: .now() + TestScale.timeout(10)) == .timedOut {
                gaveUpWaiting.withLockedValue { $0 = true }
            }
        }
        box.withLockedValue { $0 = observation }
        try await center.synchronize()
        for _ in 0..<count { try center.post("batched.cancel") }
        try await center.synchronize()
        _ = try await started.wait(for: 1, "the first handler invocation")
        // cancel() blocks until the held invocation returns, so it runs on a thread of its own while this task
        // waits for the gate to close and then lets the invocation return.
        async let cancelled: Void = onThread("cancel-mid-batch") {
            observation.cancel()
            cancelReturned.withLockedValue { $0 = true }
        }
        try await poll("cancel() to close the gate", timeout: .seconds(TestScale.timeout(10))) {
            observation.isCancelled ? () : nil
        }
        gateClosed.signal()
        try await cancelled
        // Everything the center read was handed to the queue before the second synchronize() returned: once
        // this block runs, every job of this observation has run (or skipped its handlers).
        await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
        #expect(!gaveUpWaiting.withLockedValue { $0 })
        #expect(started.values.count == 1)
        #expect(lateInvocations.withLockedValue { $0 } == 0)
        box.withLockedValue { $0 = nil }
        await center.close()
        try await daemon.stop()
    }

    @Test("notifications read just before the daemon goes away are delivered, ahead of the disconnect event")
    func deliveredBeforeDisconnect() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center(reconnect: .never)
        let poster = try await daemon.center(reconnect: .never)
        let count = TestScale.count(2_000)
        let queue = DispatchQueue(label: "batched.disconnect")
        let received = Collector<String>()
        let events = center.connectionEvents()
        let observation = try center.observe("batched.bye", on: .queue(queue)) { notification in
            received.append(notification.payloadString ?? "")
        }
        try await center.synchronize()
        for index in 0..<(count - 1) { try poster.post("batched.bye", text: "\(index)") }
        // Acknowledged once queued to the observer; the graceful stop writes what is queued, then closes.
        _ = try await poster.postAndWait("batched.bye", payload: Array("\(count - 1)".utf8))
        try await daemon.stop()
        var event = try await nextEvent(events)
        while let current = event, !Self.isDisconnect(current) { event = try await nextEvent(events) }
        #expect(event.map(Self.isDisconnect) == true)
        // Handed to the queue before the disconnect was reported, so all of them have run once this block does.
        let ran = await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: received.values) }
        }
        #expect(ran == (0..<count).map(String.init))
        withExtendedLifetime(observation) {}
        await poster.close()
        await center.close()
    }

    @Test("self. posts still reach queue observations in order")
    func processLocalBurst() async throws {
        let center = NotifyCenter(configuration: .init(socketPath: TestServer.makeSocketPath(), reconnect: .never))
        let count = TestScale.count(2_000)
        let received = Collector<String>()
        let observation = try center.observe("self.batched", on: .queue(DispatchQueue(label: "batched.local"))) {
            received.append($0.payloadString ?? "")
        }
        for index in 0..<count { try center.post("self.batched", text: "\(index)") }
        #expect(try await received.wait(for: count) == (0..<count).map(String.init))
        withExtendedLifetime(observation) {}
        await center.close()
    }

    @Test("staging hands one job per burst to a queued observation, and none to an inline one")
    func oneJobPerBurst() {
        let counting = CountingExecutor()
        let handled = Collector<UInt64>()
        let staged = ObservationCore(
            id: 1, name: "batched.unit", key: SubscriptionKey(pattern: "batched.unit", policy: .coalesce), stagingSlot: 0,
            executor: counting, handler: { handled.append($0.sequence) })
        let inlineHandled = Collector<UInt64>()
        let inline = ObservationCore(
            id: 2, name: "batched.unit", key: SubscriptionKey(pattern: "batched.unit", policy: .coalesce), stagingSlot: 1,
            executor: ImmediateExecutor(), handler: { inlineHandled.append($0.sequence) })
        let staging = DeliveryStaging()
        let sender = Notify.SenderCredentials(pid: 1, uid: 0, gid: 0)
        for round in 0..<2 {
            for sequence in 1...5 {
                let notification = ReceivedNotification(
                    name: "batched.unit", payload: [], sequence: UInt64(round * 5 + sequence), sender: sender)
                staging.add(notification, for: staged)
                staging.add(notification, for: inline)
            }
            // `.immediate` runs as each notification is read; the others wait for the end of the burst.
            #expect(inlineHandled.values.count == (round + 1) * 5)
            #expect(counting.jobCount == round)
            staging.flush()
            #expect(counting.jobCount == round + 1)
        }
        staging.flush()
        #expect(counting.jobCount == 2)
        counting.runAll()
        #expect(handled.values == Array(1...10))
        #expect(inlineHandled.values == Array(1...10))

        // A long burst is handed out in slices of at most `maxBatch`, in order, so the target can do other work
        // between them.
        let burst = 2 * DeliveryStaging.maxBatch + 10
        for sequence in 11...(10 + burst) {
            staging.add(ReceivedNotification(name: "batched.unit", payload: [], sequence: UInt64(sequence), sender: sender), for: staged)
        }
        #expect(counting.jobCount == 2, "two full slices went out during the burst")
        staging.flush()
        #expect(counting.jobCount == 3)
        counting.runAll()
        #expect(handled.values == (1...(10 + burst)).map { UInt64($0) })
        _ = staged.cancel()
        _ = inline.cancel()
    }

    @Test("a batch hands each notification's payload intact and in order, and one cut short by a cancel frees the rest")
    func batchOwnership() throws {
        let counting = CountingExecutor()
        let handled = Collector<String>()
        // The handler cancels its own observation at the third notification: the batch stops there.
        let holder = NIOLockedValueBox<ObservationCore?>(nil)
        let observation = ObservationCore(
            id: 1, name: "batched.own", key: SubscriptionKey(pattern: "batched.own", policy: .coalesce), stagingSlot: 0,
            executor: counting,
            handler: { note in
                handled.append(note.payloadString ?? "")
                if note.sequence == 3 { _ = holder.withLockedValue { $0 }?.cancel() }
            })
        holder.withLockedValue { $0 = observation }
        let staging = DeliveryStaging()
        let sender = Notify.SenderCredentials(pid: 1, uid: 0, gid: 0)
        // Every block the payloads went to (a burst's first block holds 256 bytes, so there are several).
        var blocks: [WeakBlock] = []
        for sequence in 1...40 {
            let text = Array("payload \(sequence) ".utf8) + Array(repeating: UInt8(ascii: "x"), count: 100)
            let storage = text.withUnsafeBytes { staging.storePayload($0) }
            if case .block(let stored, _, _) = storage, blocks.last?.block !== stored { blocks.append(WeakBlock(stored)) }
            staging.add(
                ReceivedNotification(name: "batched.own", storage: storage, sequence: UInt64(sequence), sender: sender),
                for: observation)
        }
        staging.flush()
        #expect(blocks.count > 1 && blocks.allSatisfy { $0.block != nil }, "the staged batch holds every block")
        counting.runAll()
        #expect(handled.values == (1...3).map { "payload \($0) " + String(repeating: "x", count: 100) })
        // The 37 notifications the cancel cut off went with the job: nothing keeps a block alive any more.
        #expect(blocks.allSatisfy { $0.block == nil }, "the undelivered notifications were freed with the batch")
        holder.withLockedValue { $0 = nil }
    }

    private static let queueKey = DispatchSpecificKey<String>()

    private static func isDisconnect(_ event: ConnectionEvent) -> Bool {
        if case .disconnected = event { return true }
        return false
    }
}

/// A payload block, not kept alive.
private struct WeakBlock {
    weak var block: PayloadBlock?
    init(_ block: PayloadBlock) { self.block = block }
}

/// Keeps jobs instead of running them, so a test can count and then run them.
private final class CountingExecutor: DeliveryExecutor {
    private let jobs = NIOLockedValueBox<[@Sendable () -> Void]>([])

    var jobCount: Int { jobs.withLockedValue { $0.count } }

    func enqueue(_ job: @escaping @Sendable () -> Void) {
        jobs.withLockedValue { $0.append(job) }
    }

    /// Runs the kept jobs in order and forgets them.
    func runAll() {
        let kept = jobs.withLockedValue { jobs in
            defer { jobs.removeAll() }
            return jobs
        }
        for job in kept { job() }
    }
}
