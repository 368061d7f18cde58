import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NotifyTestSupport
import NotifyWire
import Testing

@testable import Notify

/// Consecutive notifications on one name are routed from their bytes with the observers looked up for the first
/// (``NotificationRun``); and posts are encoded from the caller's bytes and written in batches by whichever
/// flush round is running. These tests pin what a user would notice if either went wrong: a new observation
/// missing notifications, a notification under the wrong name, lost or reordered posts, altered payload bytes.
@Suite("Notification runs and posting")
struct NotificationRunTests {
    @Test("an observation added while notifications on its name keep arriving receives the next one")
    func observationAddedMidRun() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let poster = try await daemon.center()
        let first = Collector<String>()
        let second = Collector<String>()
        let a = try observer.observe("run.added", on: .immediate) { first.append($0.payloadString ?? "") }
        try await observer.synchronize()
        try poster.post("run.added", text: "1")
        #expect(try await first.wait(for: 1, "the first notification") == ["1"])
        // The name is already subscribed, so this sends nothing to the daemon: no other frame ends the run that
        // "1" opened, and only the routing generation tells the I/O thread that the observers changed.
        let b = try observer.observe("run.added", on: .immediate) { second.append($0.payloadString ?? "") }
        try poster.post("run.added", text: "2")
        #expect(try await second.wait(for: 1, "the notification after observing") == ["2"])
        #expect(try await first.wait(for: 2, "both notifications") == ["1", "2"])
        withExtendedLifetime((a, b)) {}
        await poster.close()
        await observer.close()
        try await daemon.stop()
    }

    @Test("an observation cancelled between notifications of a run receives nothing more; the others go on")
    func observationCancelledMidRun() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let poster = try await daemon.center()
        let kept = Collector<String>()
        let cancelled = Collector<String>()
        let a = try observer.observe("run.cancel", on: .immediate) { kept.append($0.payloadString ?? "") }
        let b = try observer.observe("run.cancel", on: .immediate) { cancelled.append($0.payloadString ?? "") }
        try await observer.synchronize()
        try poster.post("run.cancel", text: "1")
        #expect(try await cancelled.wait(for: 1, "the first notification") == ["1"])
        b.cancel()
        try poster.post("run.cancel", text: "2")
        try poster.post("run.cancel", text: "3")
        #expect(try await kept.wait(for: 3, "the kept observation's notifications") == ["1", "2", "3"])
        #expect(cancelled.values == ["1"])
        withExtendedLifetime(a) {}
        await poster.close()
        await observer.close()
        try await daemon.stop()
    }

    @Test("interleaved names of equal length each reach their own observers, under their own name, in order")
    func interleavedNames() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let poster = try await daemon.center()
        let count = TestScale.count(2_000)
        let onlyA = Collector<String>()
        let pattern = Collector<String>()
        let a = try observer.observe("run.a", on: .immediate) { onlyA.append("\($0.name)=\($0.payloadString ?? "")") }
        let all = try observer.observe("run.*", on: .queue(DispatchQueue(label: "run.pattern"))) {
            pattern.append("\($0.name)=\($0.payloadString ?? "")")
        }
        try await observer.synchronize()
        // Runs of one, two and three posts per name, so some notifications continue a run and some end one.
        var expectedAll: [String] = []
        var index = 0
        while index < count {
            let name = index % 3 == 0 ? "run.b" : "run.a"
            for _ in 0..<(index % 4 + 1) where index < count {
                try poster.post(name, text: "\(index)")
                expectedAll.append("\(name)=\(index)")
                index += 1
            }
        }
        let expectedA = expectedAll.filter { $0.hasPrefix("run.a=") }
        #expect(try await pattern.wait(for: expectedAll.count, "every notification through the pattern") == expectedAll)
        #expect(try await onlyA.wait(for: expectedA.count, "the run.a notifications") == expectedA)
        withExtendedLifetime((a, all)) {}
        await poster.close()
        await observer.close()
        try await daemon.stop()
    }

    @Test("the payload arrives byte for byte from an array, Data, a non-contiguous collection, text and nothing")
    func payloadSources() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let poster = try await daemon.center()
        let received = Collector<[UInt8]>()
        let observation = try observer.observe("run.payload", on: .immediate) { received.append($0.payload) }
        try await observer.synchronize()
        let bytes: [UInt8] = (0..<300).map { UInt8($0 % 251) }
        try poster.post("run.payload", payload: bytes)
        try poster.post("run.payload", payload: Data(bytes.reversed()))
        // A lazily mapped range has no contiguous storage: the library copies it once.
        try poster.post("run.payload", payload: (0..<70).lazy.map { UInt8(255 - $0) })
        try poster.post("run.payload", text: "héllo")
        try poster.post("run.payload")
        let values = try await received.wait(for: 5, "five payloads")
        #expect(values[0] == bytes)
        #expect(values[1] == Array(bytes.reversed()))
        #expect(values[2] == (0..<70).map { UInt8(255 - $0) })
        #expect(values[3] == Array("héllo".utf8))
        #expect(values[4] == [])
        withExtendedLifetime(observation) {}
        await poster.close()
        await observer.close()
        try await daemon.stop()
    }

    @Test("four threads posting at once through one center: every post arrives, each thread's in its order")
    func concurrentPostersKeepTheirOrder() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let poster = try await daemon.center()
        let perThread = TestScale.count(10_000)
        let threads = 4
        let received = Collector<[UInt8]>()
        let observation = try observer.observe("run.threads", on: .immediate) { received.append($0.payload) }
        try await observer.synchronize()
        let failures = NIOLockedValueBox<[String]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 0..<perThread {
                var payload = [UInt8(thread)]
                withUnsafeBytes(of: UInt32(index).bigEndian) { payload.append(contentsOf: $0) }
                do {
                    try poster.post("run.threads", payload: payload)
                } catch {
                    failures.withLockedValue { $0.append("\(error)") }
                    return
                }
            }
        }
        #expect(failures.withLockedValue { $0 }.isEmpty)
        let values = try await received.wait(for: threads * perThread, timeout: TestScale.timeout(30), "every post")
        var next = [Int](repeating: 0, count: threads)
        var outOfOrder = 0
        for value in values {
            let thread = Int(value[0])
            let index = Int(value[1]) << 24 | Int(value[2]) << 16 | Int(value[3]) << 8 | Int(value[4])
            if index != next[thread] { outOfOrder += 1 }
            next[thread] = index + 1
        }
        #expect(outOfOrder == 0)
        #expect(next == [Int](repeating: perThread, count: threads))
        withExtendedLifetime(observation) {}
        await poster.close()
        await observer.close()
        try await daemon.stop()
    }

    @Test("notifications kept after their burst still hold their own payloads, small and larger than a block")
    func keptNotificationsKeepTheirPayloads() async throws {
        let daemon = try await TestServer.start()
        let observer = try await daemon.center()
        let poster = try await daemon.center()
        let count = TestScale.count(3_000)
        let kept = Collector<ReceivedNotification>()
        let observation = try observer.observe("run.kept", on: .queue(DispatchQueue(label: "run.kept"))) { kept.append($0) }
        try await observer.synchronize()
        // Every 97th payload is larger than a payload block (16 KiB); the rest vary from 0 to 199 bytes.
        func payload(_ index: Int) -> [UInt8] {
            let size = index % 97 == 0 ? 20_000 + index : index % 200
            return (0..<size).map { UInt8(truncatingIfNeeded: $0 &+ index) }
        }
        for index in 0..<count { try poster.post("run.kept", payload: payload(index)) }
        let notifications = try await kept.wait(for: count, timeout: TestScale.timeout(30), "every notification")
        var wrong = 0
        for (index, notification) in notifications.enumerated() {
            let expected = payload(index)
            if notification.payload != expected || notification.payloadCount != expected.count { wrong += 1 }
            if notification.withPayloadBytes({ Array($0) }) != expected { wrong += 1 }
        }
        #expect(wrong == 0)
        // Equality and hashing go by the bytes, wherever they are stored.
        var copy = notifications[5]
        copy.payload = payload(5)
        #expect(copy == notifications[5])
        #expect(copy.hashValue == notifications[5].hashValue)
        copy.payload = payload(6)
        #expect(copy != notifications[5])
        withExtendedLifetime(observation) {}
        await poster.close()
        await observer.close()
        try await daemon.stop()
    }
}
