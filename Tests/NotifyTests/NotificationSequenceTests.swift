import Foundation
import NotifyTestSupport
import Testing

@testable import Notify

@Suite("notifications(named:)")
struct NotificationSequenceTests {
    @Test("subscribed when notifications(named:) returns: what is posted before iterating starts is buffered")
    func subscribedOnReturn() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let sequence = try center.notifications(named: "sequence.early")
        try await center.synchronize()
        try await center.postAndWait("sequence.early", text: "before iterating")
        let first = try await withTimeout(10, "no notification") {
            for await note in sequence { return note.payloadString }
            return nil
        }
        #expect(first == "before iterating")
        sequence.cancel()
        await center.close()
        try await daemon.stop()
    }

    @Test("cancel(): iteration ends after the notifications already buffered")
    func cancelEndsIteration() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let sequence = try center.notifications(named: "sequence.cancel")
        try await center.synchronize()
        for index in 0..<3 { try await center.postAndWait("sequence.cancel", text: "\(index)") }
        try await center.synchronize()
        sequence.cancel()
        let payloads = try await withTimeout(10, "iteration did not end after cancel()") {
            var payloads: [String] = []
            for await note in sequence { payloads.append(note.payloadString ?? "") }
            return payloads
        }
        #expect(payloads == ["0", "1", "2"])
        await center.close()
        try await daemon.stop()
    }

    @Test("closing the center ends iteration")
    func closeEndsIteration() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let sequence = try center.notifications(named: "sequence.close")
        try await center.synchronize()
        let iteration = Task {
            var count = 0
            for await _ in sequence { count += 1 }
            return count
        }
        try await center.postAndWait("sequence.close", text: "one")
        try await center.synchronize()
        await center.close()
        // On a timeout the iteration is cancelled, so the wait ends and the test fails instead of hanging.
        let count = try await withTimeout(10, "iteration did not end when the center closed") {
            await withTaskCancellationHandler { await iteration.value } onCancel: { iteration.cancel() }
        }
        #expect(count == 1)
        try await daemon.stop()
    }
}
