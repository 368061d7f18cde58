import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Suspend/resume (PROTOCOL.md § 6.8, § 6.9, § 9.4).
@Suite("Suspend and resume", .timeLimit(.minutes(TestScale.minutes(1))))
struct SuspendResumeTests {
    @Test("while suspended nothing is delivered; nested suspends need as many resumes; the last one releases what was held")
    func nested() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            try await client.subscribe("org.example.>", id: 1)
            let poster = try await server.connect("poster")

            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            try await client.expectOK("SUSPEND (nested)") { .suspend(requestID: $0) }
            let first = try await poster.post("org.example.a", "a1")
            #expect(first.delivered == 1, "a held notification counts as delivered")
            try await client.expectQuiet("suspended twice: nothing is sent")

            try await client.expectOK("RESUME (inner)") { .resume(requestID: $0) }
            try await poster.post("org.example.a", "a2")
            let last = try await poster.post("org.example.b", "b1")
            try await client.expectQuiet("one RESUME of two: still suspended")
            let clients = try await client.query([DaemonClient].self, .clients)
            #expect(clients.count == 1)
            #expect(clients.first?.suspended == true)
            #expect((clients.first?.heldBytes ?? 0) > 0, "held bytes are visible in introspection")

            // The last RESUME: its OK, then the held notifications under the coalesce policy, in sequence order.
            let (reply, before) = try await client.request { .resume(requestID: $0) }
            #expect(before.isEmpty, "nothing is released before the OK: \(before.map(\.summary))")
            guard case .ok = reply else {
                Issue.record("expected OK for the last RESUME, got \(reply.summary)")
                return
            }
            let merged = try await client.next()
            guard case .notificationMerged(let count, let a) = merged else {
                Issue.record("expected NOTIFICATION_MERGED for org.example.a, got \(merged.summary)")
                return
            }
            #expect(count == 1 && a.payloadText == "a2" && a.name == "org.example.a")
            let plain = try await client.nextNotification()
            #expect(plain.sequence == last.sequence && plain.payloadText == "b1", "nothing merged: a plain NOTIFICATION")
            try await client.expectQuiet("everything was released")

            // Not suspended any more: new posts come at once.
            let live = try await poster.post("org.example.c", "c")
            #expect(try await client.nextNotification().sequence == live.sequence)
            let after = try await client.query([DaemonClient].self, .clients)
            #expect(after.first?.suspended == false)
            #expect(after.first?.heldBytes == 0)
        }
    }

    @Test("RESUME without a matching SUSPEND is invalid-request, changes nothing, and is not fatal")
    func resumeWithoutSuspend() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .bob)
            try await client.subscribe("org.example.a", id: 1)
            let error = try await client.expectError("RESUME") { .resume(requestID: $0) }
            #expect(error.code == .invalidRequest)
            #expect(error.message == "RESUME without a matching SUSPEND")
            #expect(!error.closesConnection)

            // One SUSPEND, two RESUMEs: the second is refused and the connection is not left in a strange state.
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            try await client.expectOK("RESUME") { .resume(requestID: $0) }
            let again = try await client.expectError("RESUME") { .resume(requestID: $0) }
            #expect(again.code == .invalidRequest)
            let poster = try await server.connect("poster")
            let posted = try await poster.post("org.example.a", "x")
            #expect(try await client.nextNotification().sequence == posted.sequence)
        }
    }

    @Test("replies are not held while suspended: RETAINED, STATE, PONG and QUERY_RESULT still come")
    func repliesWhileSuspended() async throws {
        try await withServer(everyUser: true) { server in
            let poster = try await server.connect("poster")
            try await poster.post("org.example.status", "up", retain: true)
            let client = try await server.connect("client", as: .alice)
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            let retained = try await client.subscribe("org.example.status", id: 1, retained: true)
            #expect(retained.map { $0.anyNotification?.payloadText } == ["up"])
            #expect(try await client.state(of: "org.example.status") == nil)
            _ = try await client.query(DaemonStatus.self, .status)
            try await poster.post("org.example.status", "down")
            try await client.expectQuiet("the live post is held")
        }
    }

    @Test("UNSUBSCRIBE while holding: the OK comes at once, what is held stays held and is released on RESUME")
    func unsubscribeWhileHolding() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            try await client.subscribe("org.example.q", id: 4, policy: .queue(limit: 2))
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            let poster = try await server.connect("poster")
            for index in 0..<3 { try await poster.post("org.example.q", "\(index)") }
            try await client.unsubscribe(id: 4)
            #expect(try await poster.post("org.example.q", "after").delivered == 0, "the subscription is gone")
            try await client.expectOK("RESUME") { .resume(requestID: $0) }
            var frames: [String] = []
            for _ in 0..<3 { frames.append(try await client.next().summary) }
            #expect(frames[0] == "OVERFLOW(subscription 4, dropped 1)")
            #expect(frames.dropFirst().map { $0.contains("'org.example.q', payload '1')") || $0.contains("'org.example.q', payload '2')") } == [true, true], "\(frames)")
            try await client.expectQuiet("nothing else")
        }
    }

    @Test("held bytes are bounded per connection: the oldest are evicted (a coalesced one with all merged into it) and reported as OVERFLOW(0, n)")
    func heldBoundEviction() async throws {
        let limit = 16 * 1_024
        try await withServer(everyUser: true, { $0.outboundByteLimit = limit }) { server in
            // Root is exempt from the per-uid quota, so only the per-connection bound applies.
            let client = try await server.connect("client")
            try await client.subscribe("org.q", id: 1, policy: .queue(limit: 1_000))
            try await client.subscribe("org.c.>", id: 2)
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            let poster = try await server.connect("poster")
            let kilobyte = String(repeating: "x", count: 1_000)
            // 40 names posted three times each under coalesce, then 60 posts under queue: 180 posts, ~180 kB.
            for round in 0..<3 {
                for name in 0..<40 { try await poster.post("org.c.n\(name)", "\(round)|\(kilobyte)") }
            }
            for index in 0..<60 { try await poster.post("org.q", "\(index)|\(kilobyte)") }
            let status = try await server.status()
            #expect(status.heldBytes <= limit, "held bytes \(status.heldBytes) within the bound \(limit)")

            try await client.expectOK("RESUME") { .resume(requestID: $0) }
            let first = try await client.next()
            guard case .overflow(0, let evicted) = first else {
                Issue.record("expected OVERFLOW(0, n) first, got \(first.summary)")
                return
            }
            var accounted = evicted
            var queued: [Int] = []
            var lastSequence: UInt64 = 0
            while accounted < 180 {
                let frame = try await client.next()
                guard let n = frame.anyNotification else {
                    Issue.record("unexpected \(frame.summary)")
                    return
                }
                #expect(n.sequence > lastSequence)
                lastSequence = n.sequence
                if case .notificationMerged(let merged, _) = frame { accounted += merged }
                accounted += 1
                if n.name == "org.q" { queued.append(Int(n.payloadText.split(separator: "|").first ?? "") ?? -1) }
            }
            #expect(accounted == 180, "every post received, merged or evicted")
            #expect(!queued.isEmpty && queued == Array((60 - queued.count)..<60), "the newest survive, in order: \(queued)")
            try await client.expectQuiet("nothing else")
            let clients = try await poster.query([DaemonClient].self, .clients)
            #expect(clients.first { $0.clientName == "client" }?.dropped == evicted)
        }
    }

    @Test("a suspended connection that closes discards what it held")
    func closeWhileSuspended() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            try await client.subscribe("org.example.>", id: 1, policy: .queue(limit: 100))
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            let poster = try await server.connect("poster")
            for index in 0..<10 { try await poster.post("org.example.a", "\(index)") }
            #expect(try await server.status().heldBytes > 0)
            await client.close()
            try await server.waitForStatus("the closed connection's held bytes released") {
                $0.connections == 1 && $0.heldBytes == 0
            }
        }
    }
}
