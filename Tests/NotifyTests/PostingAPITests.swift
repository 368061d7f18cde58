import Foundation
import NotifyTestSupport
import Testing

@testable import Notify

@Suite("Posting API")
struct PostingAPITests {
    @Test("postAndWait takes every payload post takes: text, an array, Data, any byte collection, nothing")
    func postAndWaitMatchesPost() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let received = Collector<String>()
        let observation = try center.observe("api.symmetric", on: .immediate) { received.append($0.payloadString ?? "?") }
        try await center.synchronize()
        let receipts = [
            try await center.postAndWait("api.symmetric", text: "text"),
            try await center.postAndWait("api.symmetric", text: "retained", retain: true),
            try await center.postAndWait("api.symmetric", payload: Array("array".utf8)),
            try await center.postAndWait("api.symmetric", payload: Data("data".utf8)),
            try await center.postAndWait("api.symmetric", payload: "bytes".utf8),
            try await center.postAndWait("api.symmetric"),
        ]
        #expect(receipts.map(\.deliveredCount) == Array(repeating: 1, count: 6))
        #expect(try await received.wait(for: 6) == ["text", "retained", "array", "data", "bytes", ""])
        // The same calls, fire and forget.
        try center.post("api.symmetric", text: "text")
        try center.post("api.symmetric", text: "retained", retain: true)
        try center.post("api.symmetric", payload: Array("array".utf8))
        try center.post("api.symmetric", payload: Data("data".utf8))
        try center.post("api.symmetric", payload: "bytes".utf8)
        try center.post("api.symmetric")
        #expect(try await received.wait(for: 12).suffix(6) == ["text", "retained", "array", "data", "bytes", ""])
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("a self. name posted with postAndWait(text:) reaches this process's observers without a daemon")
    func postAndWaitTextLocal() async throws {
        let center = NotifyCenter(
            configuration: NotifyCenter.Configuration(
                socketPath: TestServer.makeSocketPath(), clientName: "test", reconnect: .never))
        let received = Collector<String>()
        let observation = try center.observe("self.api.text", on: .immediate) { received.append($0.payloadString ?? "?") }
        let receipt = try await center.postAndWait("self.api.text", text: "local")
        #expect(receipt.deliveredCount == 1)
        #expect(try await received.wait(for: 1) == ["local"])
        withExtendedLifetime(observation) {}
        await center.close()
    }
}
