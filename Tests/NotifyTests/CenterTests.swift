import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NotifyServer
import NotifyTestSupport
import NotifyWire
import Testing

@testable import Notify

@Suite("NotifyCenter against an in-process daemon")
struct CenterTests {
    @Test("a handler on a queue target runs on that queue, in daemon order")
    func queueTargetOrder() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let queue = DispatchQueue(label: "observer")
        let received = Collector<UInt64>()
        let observation = try center.observe("test.order", on: .queue(queue)) { notification in
            dispatchPrecondition(condition: .onQueue(queue))
            received.append(notification.sequence)
        }
        try await center.synchronize()
        for index in 0..<500 { try center.post("test.order", text: "\(index)") }
        let sequences = try await received.wait(for: 500)
        #expect(sequences == sequences.sorted())
        #expect(Set(sequences).count == 500)
        observation.cancel()
        await center.close()
        try await daemon.stop()
    }

    @Test("a concurrent queue target still runs one observation's handlers one at a time, in order")
    func concurrentQueueTarget() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let queue = DispatchQueue(label: "concurrent", attributes: .concurrent)
        let received = Collector<String>()
        let running = NIOLockedValueBox(0)
        let overlapped = NIOLockedValueBox(false)
        let observation = try center.observe("test.concurrent", on: .queue(queue)) { notification in
            let now = running.withLockedValue { $0 += 1; return $0 }
            if now > 1 { overlapped.withLockedValue { $0 = true } }
            received.append(notification.payloadString ?? "")
            running.withLockedValue { $0 -= 1 }
        }
        try await center.synchronize()
        for index in 0..<300 { try center.post("test.concurrent", text: "\(index)") }
        let payloads = try await received.wait(for: 300)
        #expect(payloads == (0..<300).map(String.init))
        #expect(overlapped.withLockedValue { $0 } == false)
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("an immediate handler runs on the I/O thread, not the caller's")
    func immediateTarget() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let threads = Collector<String>()
        let observation = try center.observe("test.immediate", on: .immediate) { _ in
            threads.append(Thread.current.name ?? "")
        }
        try await center.synchronize()
        try center.post("test.immediate")
        let names = try await threads.wait(for: 1)
        #expect(names[0].contains("NIO"), "expected an NIO event loop thread, got '\(names[0])'")
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("a notification carries name, payload, sequence and the poster's kernel credentials")
    func notificationFields() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let poster = try await daemon.center()
        let received = Collector<ReceivedNotification>()
        let observation = try observer.observe("test.fields", on: .immediate) { received.append($0) }
        try await observer.synchronize()
        let receipt = try await poster.postAndWait("test.fields", payload: [0, 1, 2, 255])
        let notification = try await received.wait(for: 1)[0]
        #expect(receipt.deliveredCount == 1)
        #expect(notification.sequence == receipt.sequence)
        #expect(notification.name == "test.fields")
        #expect(notification.payload == [0, 1, 2, 255])
        #expect(notification.payloadString == nil)
        #expect(notification.sender == SenderCredentials(pid: UInt32(getpid()), uid: getuid(), gid: getgid()))
        withExtendedLifetime(observation) {}
        await observer.close()
        await poster.close()
        try await daemon.stop()
    }

    @Test("observations of one name share one daemon subscription, removed with the last one")
    func sharedSubscription() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let first = Collector<UInt64>()
        let second = Collector<UInt64>()
        let a = try center.observe("test.shared", on: .immediate) { first.append($0.sequence) }
        let b = try center.observe("test.shared", on: .immediate) { second.append($0.sequence) }
        try await center.synchronize()
        #expect(try await subscriptions(daemon) == 1)

        let receipt = try await center.postAndWait("test.shared")
        #expect(receipt.deliveredCount == 1, "one connection, one delivery")
        #expect(try await first.wait(for: 1) == [receipt.sequence])
        #expect(try await second.wait(for: 1) == [receipt.sequence])

        a.cancel()
        try await center.synchronize()
        #expect(try await subscriptions(daemon) == 1)
        b.cancel()
        try await center.synchronize()
        #expect(try await subscriptions(daemon) == 0)
        #expect(try await center.postAndWait("test.shared").deliveredCount == 0)
        await center.close()
        try await daemon.stop()
    }

    @Test("dropping the token cancels the observation")
    func tokenDropCancels() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let received = Collector<UInt64>()
        do {
            _ = try center.observe("test.drop", on: .immediate) { received.append($0.sequence) }
        }
        try await center.synchronize()
        #expect(try await subscriptions(daemon) == 0)
        #expect(try await center.postAndWait("test.drop").deliveredCount == 0)
        #expect(received.values.isEmpty)
        await center.close()
        try await daemon.stop()
    }

    @Test("cancel() inside the handler stops further deliveries and is idempotent")
    func cancelInsideHandler() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let received = Collector<UInt64>()
        let box = NIOLockedValueBox<Observation?>(nil)
        let queue = DispatchQueue(label: "cancel-inside")
        let observation = try center.observe("test.cancel-inside", on: .queue(queue)) { notification in
            received.append(notification.sequence)
            box.withLockedValue { $0 }?.cancel()
            box.withLockedValue { $0 }?.cancel()
        }
        box.withLockedValue { $0 = observation }
        try await center.synchronize()
        for _ in 0..<20 { try center.post("test.cancel-inside") }
        try await center.synchronize()
        _ = try await received.wait(for: 1)
        // Drain the queue: every delivery that was already queued has run (or been skipped) after this.
        await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
        #expect(received.values.count == 1)
        #expect(observation.isCancelled)
        box.withLockedValue { $0 = nil }
        await center.close()
        try await daemon.stop()
    }

    @Test("no handler invocation starts after cancel() returns", arguments: 0..<20)
    func noHandlerAfterCancel(round: Int) async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let cancelReturned = NIOLockedValueBox(false)
        let violations = NIOLockedValueBox(0)
        let seen = Collector<Int>()
        let queue = DispatchQueue(label: "racing", attributes: .concurrent)
        let observation = try center.observe("test.race", on: .queue(queue)) { _ in
            if cancelReturned.withLockedValue({ $0 }) { violations.withLockedValue { $0 += 1 } }
            seen.append(1)
        }
        try await center.synchronize()
        for _ in 0..<200 { try center.post("test.race") }
        _ = try await seen.wait(for: 1 + round % 5)
        observation.cancel()
        cancelReturned.withLockedValue { $0 = true }
        try await center.synchronize()
        for _ in 0..<50 { try center.post("test.race") }
        try await center.synchronize()
        await withCheckedContinuation { continuation in queue.async(flags: .barrier) { continuation.resume() } }
        #expect(violations.withLockedValue { $0 } == 0)
        await center.close()
        try await daemon.stop()
    }

    @Test("notifications(named:) yields in order and counts what a slow consumer misses")
    func asyncSequence() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let sequence = try center.notifications(named: "test.sequence", bufferLimit: 4)
        try await center.synchronize()
        // Nobody consumes yet: 10 notifications into a buffer of 4 drop the 6 oldest.
        for index in 0..<10 { try center.post("test.sequence", text: "\(index)") }
        try await center.synchronize()
        try await waitUntil("six drops counted") { sequence.droppedCount == 6 }
        var iterator = sequence.makeAsyncIterator()
        var payloads: [String] = []
        for _ in 0..<4 { payloads.append(await iterator.next()?.payloadString ?? "") }
        #expect(payloads == ["6", "7", "8", "9"])
        sequence.cancel()
        await center.close()
        try await daemon.stop()
    }

    @Test("invalid names and oversized payloads are rejected before anything is sent")
    func localValidation() async throws {
        let daemon = try await TestServer.start { $0.limits.maxPayloadLength = 16 }
        let center = try await daemon.center()
        #expect(throws: NotifyError.self) { try center.post("bad name") }
        #expect(throws: NotifyError.self) { _ = try center.observe("a..b", on: .immediate) { _ in } }
        do {
            try center.post("test.big", payload: [UInt8](repeating: 0, count: 17))
            Issue.record("an oversized payload was accepted")
        } catch let NotifyError.payloadTooLarge(size, limit) {
            #expect(size == 17 && limit == 16)
        }
        await center.close()
        try await daemon.stop()
    }

    @Test("connect fails fast with a clear error when no daemon listens")
    func cannotConnect() async throws {
        let path = TestServer.makeSocketPath()
        do {
            _ = try await NotifyCenter.connect(configuration: .init(socketPath: path))
            Issue.record("connect succeeded without a daemon")
        } catch let error as NotifyError {
            guard case .cannotConnect(let reported, _) = error else {
                Issue.record("unexpected error \(error)")
                return
            }
            #expect(reported == path)
            #expect(error.description.contains("cannot connect to notifyd at \(path)"))
        }
    }

    @Test("self. names are delivered in-process without a daemon")
    func processLocalNames() async throws {
        let center = NotifyCenter(configuration: .init(socketPath: TestServer.makeSocketPath(), reconnect: .never))
        let queue = DispatchQueue(label: "local")
        let received = Collector<ReceivedNotification>()
        let observation = try center.observe("self.local.changed", on: .queue(queue)) { notification in
            dispatchPrecondition(condition: .onQueue(queue))
            received.append(notification)
        }
        try center.post("self.local.changed", text: "one")
        try center.post("self.local.changed", text: "two")
        let values = try await received.wait(for: 2)
        #expect(values.map(\.payloadString) == ["one", "two"])
        #expect(values[0].sender.pid == UInt32(getpid()))
        #expect(throws: NotifyError.self) { try center.post("test.remote") }
        withExtendedLifetime(observation) {}
        await center.close()
    }

    @Test("after the daemon restarts, observations resume and the event says it restarted")
    func reconnectAfterRestart() async throws {
        let daemon = try await TestServer.start()
        let path = daemon.socketPath
        let center = try await daemon.center(reconnect: .init(initialDelay: 0.02, maximumDelay: 0.2))
        let events = center.connectionEvents()
        let received = Collector<String>()
        let observation = try center.observe("test.restart", on: .immediate) { received.append($0.payloadString ?? "") }
        try await center.synchronize()
        try await daemon.stop()

        let disconnected = try await nextEvent(events)
        guard case .disconnected = disconnected else {
            Issue.record("expected a disconnect event, got \(String(describing: disconnected))")
            return
        }
        let second = try await TestServer.start(socketPath: path)
        try await center.waitUntilConnected(timeout: 10)
        let connected = try await nextEvent(events)
        #expect(connected == .connected(daemonRestarted: true, instanceID: second.server.instanceID))
        try await center.synchronize()
        let receipt = try await center.postAndWait("test.restart", payload: Array("again".utf8))
        #expect(receipt.deliveredCount == 1)
        #expect(try await received.wait(for: 1) == ["again"])
        withExtendedLifetime(observation) {}
        await center.close()
        try await second.stop()
    }

    @Test("a refused subscription fails the next synchronize() and is reported as an event; posting while disconnected fails fast")
    func notConnectedAndRejections() async throws {
        let daemon = try await TestServer.start { $0.limits.maxSubscriptions = 1 }
        let center = try await daemon.center(reconnect: .never)
        let events = center.connectionEvents()
        let a = try center.observe("test.one", on: .immediate) { _ in }
        let b = try center.observe("test.two", on: .immediate) { _ in }
        // The refusal surfaces as an error from the next barrier...
        do {
            try await center.synchronize()
            Issue.record("synchronize() did not report the refused subscription")
        } catch let NotifyError.rejected(code, message) {
            #expect(code == .tooManySubscriptions)
            #expect(message.contains("test.two"))
        }
        // ...and as a connection event.
        let event = try await nextEvent(events)
        guard case .requestRejected(let operation, let error) = event else {
            Issue.record("expected a rejection event, got \(String(describing: event))")
            return
        }
        #expect(operation == "subscribe to test.two")
        #expect(error.contains("too-many-subscriptions"))
        try await daemon.stop()
        try await waitUntil("center notices the disconnect") {
            do { try center.post("test.one"); return false } catch { return true }
        }
        #expect(throws: NotifyError.self) { try center.post("test.one") }
        withExtendedLifetime((a, b)) {}
        await center.close()
    }

    private func subscriptions(_ daemon: TestServer) async throws -> Int {
        let snapshot = try #require(await daemon.server.snapshot())
        return snapshot.clients.reduce(0) { $0 + $1.subscriptions }
    }
}

/// The next event from `events`, failing after `timeout` seconds.
func nextEvent(_ events: AsyncStream<ConnectionEvent>, timeout: Double = 10) async throws -> ConnectionEvent? {
    try await withTimeout(timeout, "no connection event") {
        var iterator = events.makeAsyncIterator()
        return await iterator.next()
    }
}

/// Polls `condition` (on events that are not otherwise observable) until it holds, failing after `timeout`.
/// `timeout` is scaled by ``TestScale``.
func waitUntil(_ what: String, timeout: Double = 10, _ condition: @escaping @Sendable () async -> Bool) async throws {
    try await poll("\"\(what)\" to hold", timeout: .seconds(TestScale.timeout(timeout)), interval: .milliseconds(5)) {
        await condition() ? () : nil
    }
}
