import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Slow-subscriber policies (PROTOCOL.md § 9.4): what a connection that cannot take its notifications
/// (suspended, or reading too slowly) receives under `coalesce`, `queue(N)` and `disconnect`.
@Suite("Delivery policies", .timeLimit(.minutes(TestScale.minutes(2))))
struct DeliveryPolicyTests {
    /// Posts `payloads` (name, payload) fire-and-forget in one write, then waits for the poster's barrier: every post
    /// has been fanned out when this returns.
    static func postAll(_ poster: TestClient, _ posts: [(String, ByteBuffer)]) async throws {
        var frames: [ClientFrame] = []
        frames.reserveCapacity(posts.count)
        for (name, payload) in posts {
            frames.append(.post(ClientFrame.Post(requestID: poster.nextRequestID(), name: name, payload: payload)))
        }
        try await poster.send(frames)
        let before = try await poster.barrier()
        #expect(before.isEmpty, "the poster got \(before.prefix(3).map(\.summary)) instead of nothing")
    }

    @Test("coalesce while suspended: one notification per name, the latest, with the count of those merged into it")
    func coalesceSuspended() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            try await client.subscribe("org.flood.>", id: 1)
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            let poster = try await server.connect("poster")
            var posts: [(String, ByteBuffer)] = []
            for index in 0..<10 {
                posts.append(("org.flood.a", ByteBuffer(string: "a\(index)")))
                posts.append(("org.flood.b", ByteBuffer(string: "b\(index)")))
            }
            posts.append(("org.flood.c", ByteBuffer(string: "c0")))
            try await Self.postAll(poster, posts)
            try await client.expectQuiet("suspended")

            try await client.expectOK("RESUME") { .resume(requestID: $0) }
            var released: [String] = []
            var sequences: [UInt64] = []
            for _ in 0..<3 {
                let frame = try await client.next()
                switch frame {
                case .notificationMerged(let merged, let n):
                    released.append("\(n.name)=\(n.payloadText)+\(merged)")
                    sequences.append(n.sequence)
                case .notification(let n):
                    released.append("\(n.name)=\(n.payloadText)")
                    sequences.append(n.sequence)
                default:
                    released.append("unexpected \(frame.summary)")
                }
            }
            #expect(released == ["org.flood.a=a9+9", "org.flood.b=b9+9", "org.flood.c=c0"])
            #expect(sequences == [19, 20, 21], "the latest posts' sequence numbers, in order")
            try await client.expectQuiet("one frame per name")
            let status = try await server.status()
            #expect(status.merged == 18)
            #expect(status.dropped == 0)
            let clients = try await client.query([DaemonClient].self, .clients)
            #expect(clients.first?.merged == 18)
        }
    }

    @Test("queue(N) while suspended: the latest N in order, preceded by OVERFLOW with the number dropped")
    func queueSuspended() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            try await client.subscribe("org.queue.>", id: 7, policy: .queue(limit: 3))
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            let poster = try await server.connect("poster")
            try await Self.postAll(poster, (0..<10).map { ("org.queue.\($0 % 2 == 0 ? "even" : "odd")", ByteBuffer(string: "\($0)")) })

            try await client.expectOK("RESUME") { .resume(requestID: $0) }
            let overflow = try await client.next()
            guard case .overflow(let subscription, let dropped) = overflow else {
                Issue.record("expected OVERFLOW first, got \(overflow.summary)")
                return
            }
            #expect(subscription == 7)
            #expect(dropped == 7)
            var payloads: [String] = []
            for _ in 0..<3 { payloads.append(try await client.nextNotification().payloadText) }
            #expect(payloads == ["7", "8", "9"], "the limit counts all names of the subscription together")
            try await client.expectQuiet("nothing else")
            #expect(try await server.status().dropped == 7)
        }
    }

    @Test("the strongest matching subscription decides: queue over coalesce, per notification")
    func strongestPolicy() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            try await client.subscribe("org.mix.>", id: 1)
            try await client.subscribe("org.mix.a", id: 2, policy: .queue(limit: 2))
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            let poster = try await server.connect("poster")
            try await Self.postAll(
                poster,
                (0..<5).map { ("org.mix.a", ByteBuffer(string: "a\($0)")) } + (0..<5).map { ("org.mix.b", ByteBuffer(string: "b\($0)")) })
            try await client.expectOK("RESUME") { .resume(requestID: $0) }
            var frames: [String] = []
            for _ in 0..<4 { frames.append(try await client.next().summary) }
            #expect(
                frames == [
                    "OVERFLOW(subscription 2, dropped 3)", "NOTIFICATION(sequence 4, 'org.mix.a', payload 'a3')",
                    "NOTIFICATION(sequence 5, 'org.mix.a', payload 'a4')",
                    "NOTIFICATION_MERGED(merged 4, sequence 10, 'org.mix.b', payload 'b4')",
                ])
            try await client.expectQuiet("nothing else")
        }
    }

    @Test("a disconnect subscription is held like queue(1000) while suspended: suspension is not slowness")
    func disconnectWhileSuspended() async throws {
        try await withServer(everyUser: true) { server in
            let client = try await server.connect("client", as: .alice)
            try await client.subscribe("org.strict", id: 3, policy: .disconnect)
            try await client.expectOK("SUSPEND") { .suspend(requestID: $0) }
            let poster = try await server.connect("poster")
            try await Self.postAll(poster, (0..<1_005).map { ("org.strict", ByteBuffer(string: "\($0)")) })
            try await client.expectOK("RESUME") { .resume(requestID: $0) }
            let overflow = try await client.next()
            #expect(overflow.summary == "OVERFLOW(subscription 3, dropped 5)")
            var expected = 5
            while expected < 1_005 {
                let notification = try await client.nextNotification()
                #expect(notification.payloadText == "\(expected)")
                if notification.payloadText != "\(expected)" { return }
                expected += 1
            }
            try await client.expectQuiet("the connection stays open")
            #expect(try await server.status().slowConsumerDisconnects == 0)
        }
    }

    /// Posts `total` notifications of 1 KiB (payload `<index>|xxx…`) round-robin over `names`, in small batches,
    /// while `reader` (a subscriber that keeps reading) checks that it receives every one of them in order.
    static func flood(
        server: TestServer, poster: TestClient, reader: TestClient, names: [String], total: Int
    ) async throws {
        // Small batches: the reader takes each before the next is sent, so its own queue stays far below the bound.
        let batch = 16
        var lastSequence: UInt64 = 0
        var next = 0
        while next < total {
            let range = next..<min(next + batch, total)
            var buffer = poster.channel.allocator.buffer(capacity: range.count * 1_100)
            for index in range {
                var payload = ByteBuffer(string: "\(index)|")
                payload.writeRepeatingByte(UInt8(ascii: "x"), count: 1_024 - payload.readableBytes)
                ClientFrame.post(ClientFrame.Post(requestID: UInt32(index + 1), name: names[index % names.count], payload: payload))
                    .encode(into: &buffer)
            }
            try await poster.sendBuffer(buffer)
            for index in range {
                let notification = try await reader.nextNotification()
                let counter = notification.payloadText.split(separator: "|").first.map(String.init)
                guard counter == "\(index)", notification.sequence > lastSequence else {
                    throw TestFailure("reader: expected post \(index) after #\(lastSequence), got #\(notification.sequence) \(counter ?? "?")")
                }
                lastSequence = notification.sequence
            }
            next = range.upperBound
        }
        try await poster.expectQuiet("the poster is never blocked or refused")
    }

    /// Reads a resumed stalled subscriber until the last post of every name has arrived; returns the frames.
    static func drain(_ client: TestClient, finalPayloads: Set<String>) async throws -> [ServerFrame] {
        var frames: [ServerFrame] = []
        var missing = finalPayloads
        while !missing.isEmpty {
            let frame = try await client.next()
            frames.append(frame)
            if let n = frame.anyNotification { missing.remove(n.payloadText.split(separator: "|").first.map(String.init) ?? "") }
        }
        frames += try await client.barrier()
        return frames
    }

    @Test("coalesce under a stalled reader: pending stays within the bound, and every post is either received or counted as merged")
    func coalesceStalled() async throws {
        let limit = 64 * 1_024
        let total = 2_000
        let names = (0..<4).map { "org.stall.n\($0)" }
        try await withServer(everyUser: true, { $0.outboundByteLimit = limit }) { server in
            let stalled = try await server.connect("stalled", as: .alice, receiveBufferSize: 4_096)
            try await stalled.subscribe("org.stall.>", id: 1)
            try await stalled.setReading(false)
            let reader = try await server.connect("reader", as: .bob)
            try await reader.subscribe("org.stall.>", id: 1)
            let poster = try await server.connect("poster")
            try await Self.flood(server: server, poster: poster, reader: reader, names: names, total: total)

            let status = try await server.status()
            #expect(status.outboundBytes <= limit, "pending bytes stay within the bound")
            #expect(status.heldBytes > 0 && status.heldBytes <= names.count * 1_100, "one held frame per name at most")
            #expect(status.merged > 0)
            let entry = try await poster.query([DaemonClient].self, .clients).first { $0.clientName == "stalled" }
            #expect(entry?.pendingBytes ?? .max <= limit)
            #expect(entry?.heldBytes == status.heldBytes)

            try await stalled.setReading(true)
            let finals = Set((total - names.count..<total).map(String.init))
            let frames = try await Self.drain(stalled, finalPayloads: finals)
            var received = 0
            var merged: UInt64 = 0
            var lastSequence: UInt64 = 0
            var lastMergedPerName: [String: UInt64] = [:]
            for frame in frames {
                switch frame {
                case .notification(let n):
                    received += 1
                    #expect(n.sequence > lastSequence, "sequence numbers strictly increase")
                    lastSequence = n.sequence
                case .notificationMerged(let count, let n):
                    received += 1
                    merged += count
                    #expect(count >= 1)
                    #expect(n.sequence > lastSequence, "sequence numbers strictly increase")
                    lastSequence = n.sequence
                    lastMergedPerName[n.name] = count
                default:
                    Issue.record("unexpected \(frame.summary)")
                }
            }
            #expect(UInt64(received) + merged == UInt64(total), "received \(received) + merged \(merged) == posted \(total)")
            #expect(Set(lastMergedPerName.keys) == Set(names), "each name ends with a merged notification")
            let after = try await server.status()
            #expect(after.merged == merged)
            #expect(after.dropped == 0)
            #expect(after.heldBytes == 0)
        }
    }

    @Test("queue(N) under a stalled reader: in-order prefix, OVERFLOW with the exact count, then the last N")
    func queueStalled() async throws {
        let limit = 64 * 1_024
        let total = 2_000
        let names = ["org.stall.q"]
        try await withServer(everyUser: true, { $0.outboundByteLimit = limit }) { server in
            let stalled = try await server.connect("stalled", as: .alice, receiveBufferSize: 4_096)
            try await stalled.subscribe("org.stall.q", id: 5, policy: .queue(limit: 10))
            try await stalled.setReading(false)
            let reader = try await server.connect("reader", as: .bob)
            try await reader.subscribe("org.stall.q", id: 1)
            let poster = try await server.connect("poster")
            try await Self.flood(server: server, poster: poster, reader: reader, names: names, total: total)
            #expect(try await server.status().outboundBytes <= limit)

            try await stalled.setReading(true)
            let frames = try await Self.drain(stalled, finalPayloads: ["\(total - 1)"])
            var counters: [Int] = []
            var overflows: [(index: Int, dropped: UInt64)] = []
            for frame in frames {
                switch frame {
                case .notification(let n):
                    counters.append(Int(n.payloadText.split(separator: "|").first ?? "") ?? -1)
                case .overflow(let subscription, let dropped):
                    #expect(subscription == 5)
                    overflows.append((counters.count, dropped))
                default:
                    Issue.record("unexpected \(frame.summary)")
                }
            }
            #expect(overflows.count == 1, "one OVERFLOW: \(overflows)")
            guard let overflow = overflows.first else { return }
            let prefix = Array(counters[..<overflow.index])
            let tail = Array(counters[overflow.index...])
            #expect(prefix == Array(0..<prefix.count), "what was queued before holding arrives in order, complete")
            #expect(tail == Array(total - 10..<total), "after the notice, the last 10")
            #expect(prefix.count + Int(overflow.dropped) + tail.count == total, "every post received or counted as dropped")
            #expect(try await server.status().dropped == overflow.dropped)
        }
    }

    @Test("disconnect under a stalled reader: ERROR slow-consumer naming the subscription, after the frames already written, then the close")
    func disconnectStalled() async throws {
        let limit = 64 * 1_024
        try await withServer(everyUser: true, { $0.outboundByteLimit = limit }) { server in
            let stalled = try await server.connect("stalled", as: .alice, receiveBufferSize: 4_096)
            try await stalled.subscribe("org.strict.>", id: 1)
            try await stalled.subscribe("org.strict.x", id: 3, policy: .disconnect)
            try await stalled.setReading(false)
            let reader = try await server.connect("reader", as: .bob)
            try await reader.subscribe("org.strict.x", id: 1)
            let poster = try await server.connect("poster")
            try await Self.flood(server: server, poster: poster, reader: reader, names: ["org.strict.x"], total: 1_000)
            let status = try await server.status()
            #expect(status.slowConsumerDisconnects == 1)
            #expect(status.connections == 3, "the stalled connection is closing, not yet closed (it has not read the ERROR)")

            try await stalled.setReading(true)
            let (frames, end) = try await stalled.framesUntilEnd()
            #expect(end == .endOfFile)
            guard case .error(let error)? = frames.last else {
                Issue.record("the last frame should be ERROR slow-consumer, got \(frames.last?.summary ?? "nothing")")
                return
            }
            #expect(error.code == .slowConsumer)
            #expect(error.closesConnection)
            #expect(error.requestID == 0)
            #expect(
                error.message
                    == "the client did not read its notifications fast enough (over \(limit) bytes pending) and subscription 3 ('org.strict.x') asked to be disconnected")
            let counters = frames.dropLast().map { Int($0.anyNotification?.payloadText.split(separator: "|").first ?? "") ?? -1 }
            #expect(counters == Array(0..<counters.count), "whole frames in order before the ERROR")
            #expect(counters.count < 1_000)
            try await server.waitForStatus("the stalled connection closed") { $0.connections == 2 }
        }
    }
}

extension DeliveryPolicyTests {
    @Test("a subscriber that keeps reading loses nothing when a poster sends a large burst at once")
    func burstToAReadingSubscriber() async throws {
        let limit = 256 * 1_024
        // About 290 kB of notifications: more than the bound, so a daemon that flushed only at the end of the
        // read burst would hold them, but less than the bound plus the kernel's socket buffer (~200 kB), so a
        // daemon that flushes during the burst never has to, however late the reader gets the CPU.
        let total = 6_000
        try await withServer(everyUser: true, { $0.outboundByteLimit = limit }) { server in
            let reader = try await server.connect("reader", as: .bob)
            try await reader.subscribe("org.burst.>", id: 1)
            let poster = try await server.connect("poster")
            var buffer = poster.channel.allocator.buffer(capacity: total * 32)
            for index in 0..<total {
                ClientFrame.post(
                    ClientFrame.Post(requestID: UInt32(index + 1), name: "org.burst.n\(index % 10)", payload: ByteBuffer(string: "\(index)"))
                ).encode(into: &buffer)
            }
            // All posts in one write, fanned out to a reader: nothing makes it slow, so nothing may be merged or
            // dropped for it.
            try await poster.sendBuffer(buffer)
            try await poster.expectQuiet("the poster is never refused")
            var received = 0
            var merged: UInt64 = 0
            var dropped: UInt64 = 0
            while received + Int(merged + dropped) < total {
                switch try await reader.next() {
                case .notification: received += 1
                case .notificationMerged(let count, _):
                    received += 1
                    merged += count
                case .overflow(_, let count): dropped += count
                case let other: throw TestFailure("unexpected \(other.summary)")
                }
            }
            #expect(merged == 0 && dropped == 0, "a reading subscriber lost \(merged) merged and \(dropped) dropped of \(total)")
        }
    }
}
