import Foundation
import NIOCore
import NotifyNATS
import NotifyTestSupport
import Testing

/// The events of a key-value watch as they arrive, waited for by count.
final class WatchRecorder: Sendable {
    private let events = Locked<[NATSKeyValueWatchEvent]>([])
    private let ending = Locked<String?>(nil)
    let watch: NATSKeyValueWatch
    private let task: Task<Void, Never>

    init(_ watch: NATSKeyValueWatch) {
        self.watch = watch
        let events = self.events
        let ending = self.ending
        task = Task {
            do {
                for try await event in watch { events.withLock { $0.append(event) } }
                ending.withLock { $0 = "finished" }
            } catch {
                ending.withLock { $0 = "failed: \(error)" }
            }
        }
    }

    var all: [NATSKeyValueWatchEvent] { events.withLock { $0 } }
    /// The events as short strings: `PUT key=value`, `DEL key`, `done`.
    var summary: [String] { all.map(Self.summarize) }
    var end: String? { ending.withLock { $0 } }

    static func summarize(_ event: NATSKeyValueWatchEvent) -> String {
        switch event {
        case .initialValuesDone: "done"
        case .entry(let entry) where entry.operation == .put: "PUT \(entry.key)=\(String(buffer: entry.value))"
        case .entry(let entry): "\(entry.operation.rawValue) \(entry.key)"
        }
    }

    @discardableResult
    func wait(for count: Int, timeout: Double = 30) async throws -> [String] {
        do {
            return try await poll("\(count) watch event(s)", timeout: timeout) {
                let now = summary
                if now.count < count, let end { throw TestFailure("the watch ended (\(end)) after \(now)") }
                return now.count >= count ? now : nil
            }
        } catch {
            throw TestFailure("\(error); received \(summary)")
        }
    }

    func waitForEnd(timeout: Double = 20) async throws -> String {
        try await poll("the watch to end", timeout: timeout) { end }
    }
}

extension ByteBuffer {
    static func text(_ string: String) -> ByteBuffer { ByteBuffer(string: string) }
}

@Suite("NATS request/reply and JetStream key-value against nats-server", .serialized)
struct NATSKeyValueTests {
    /// How long a request that must be answered may wait: the client's default (5 s) is too short under
    /// ThreadSanitizer, where every test of the run starts at once on two slowed cores.
    private static let answered = TimeAmount.milliseconds(Int64(TestScale.timeout(10) * 1_000))

    private func jetStreamServer(_ scope: IntegrationScope, port: Int = 0) async throws -> NATSServerProcess {
        try await NATSServerProcess.start(in: scope, port: port, jetStreamDirectory: scope.directory + "/js")
    }

    @Test("request/reply: replies routed to their requests, no responders, a timeout, and the inbox after a restart")
    func requestReply() async throws {
        try await withIntegrationScope { scope in
            let server = try await NATSServerProcess.start(in: scope)
            let client = try await NATSClient.connected(to: [server.url])
            let responder = try await NATSClient.connected(to: [server.url])
            _ = try responder.subscribe("svc.echo") { message in
                guard let reply = message.replyTo else { return }
                _ = try? responder.publish(reply, payload: message.payload, headers: NATSHeaders([("Echo", "1")]))
            }
            _ = try responder.subscribe("svc.silent") { _ in }
            try await responder.flush()

            let reply = try await client.request("svc.echo", payload: .text("ping"), timeout: Self.answered)
            #expect(String(buffer: reply.payload) == "ping")
            #expect(reply.headers?["Echo"] == "1")
            // Concurrent requests share the one inbox subscription: each gets its own reply.
            let replies = try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for index in 0..<50 {
                    group.addTask {
                        (index, String(buffer: try await client.request("svc.echo", payload: .text("r\(index)"), timeout: Self.answered).payload))
                    }
                }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
            #expect(replies.count == 50 && replies.allSatisfy { $0.value == "r\($0.key)" })

            await #expect(throws: NATSClientError.noResponders("svc.nobody")) {
                try await client.request("svc.nobody", timeout: .seconds(10))
            }
            do {
                _ = try await client.request("svc.silent", timeout: .milliseconds(300))
                Issue.record("a request no one answers should time out")
            } catch NATSClientError.timedOut(let what) {
                #expect(what.contains("svc.silent"))
            }

            // After a restart both clients resubscribe (the requester its inbox) and requests work again.
            let port = server.port
            try await server.kill()
            let restarted = try await NATSServerProcess.start(in: scope, port: port)
            _ = try await poll("both clients to reconnect", timeout: 20) {
                client.statistics.reconnects == 1 && responder.statistics.reconnects == 1 ? true : nil
            }
            let again = try await client.request("svc.echo", payload: .text("after"), timeout: Self.answered)
            #expect(String(buffer: again.payload) == "after")
            #expect(restarted.child.isRunning)
            await client.close()
            await #expect(throws: NATSClientError.closed) { try await client.request("svc.echo") }
            await responder.close()
        }
    }

    @Test("a bucket is created as the official clients lay it out, bound again, and refused when missing or misnamed")
    func createAndBind() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(scope)
            let client = try await NATSClient.connected(to: [server.url])
            let kv = try await client.keyValue(bucket: "cfg")
            #expect(kv.streamName == "KV_cfg")

            let info = try await client.request("$JS.API.STREAM.INFO.KV_cfg", timeout: Self.answered)
            let json = try JSONSerialization.jsonObject(with: Data(info.payload.readableBytesView)) as? [String: Any]
            let config = try #require(json?["config"] as? [String: Any])
            #expect(config["subjects"] as? [String] == ["$KV.cfg.>"])
            #expect(config["max_msgs_per_subject"] as? Int == 1)
            #expect(config["allow_rollup_hdrs"] as? Bool == true)
            #expect(config["deny_delete"] as? Bool == true)
            #expect(config["allow_direct"] as? Bool == true)
            #expect(config["discard"] as? String == "new")
            #expect(config["storage"] as? String == "file")
            #expect(config["duplicate_window"] as? Int == 120_000_000_000)

            let bound = try await client.keyValue(bucket: "cfg", createIfMissing: false)
            try await bound.put("k", value: [1])
            #expect(try await kv.get("k")?.value == ByteBuffer(bytes: [1]))
            let memory = try await client.keyValue(bucket: "mem", storage: .memory)
            #expect(memory.bucket == "mem")

            await #expect(throws: NATSKeyValueError.bucketNotFound("nope")) {
                try await client.keyValue(bucket: "nope", createIfMissing: false)
            }
            for name in ["a.b", "", "a b", "a*", "$x"] {
                await #expect(throws: NATSKeyValueError.invalidBucketName(name)) { try await client.keyValue(bucket: name) }
            }
            for key in [".a", "a.", "", "a b", "a*", "a>", "ä"] {
                await #expect(throws: NATSKeyValueError.invalidKey(key)) { try await kv.put(key, value: [1]) }
                await #expect(throws: NATSKeyValueError.invalidKey(key)) { try await kv.get(key) }
            }
            // A stream that is not a bucket's (no per-subject limit) is refused.
            let other = try await client.request(
                "$JS.API.STREAM.CREATE.KV_plain", payload: .text(#"{"name":"KV_plain","subjects":["plain.>"]}"#),
                timeout: Self.answered)
            #expect(String(buffer: other.payload).contains("\"name\":\"KV_plain\""))
            await #expect(throws: NATSKeyValueError.badBucket("plain")) {
                try await client.keyValue(bucket: "plain", createIfMissing: false)
            }

            // A server without JetStream: nothing answers the API.
            let plain = try await NATSServerProcess.start(in: scope)
            let plainClient = try await NATSClient.connected(to: [plain.url])
            await #expect(throws: NATSClientError.noResponders("$JS.API.STREAM.INFO.KV_cfg")) {
                try await plainClient.keyValue(bucket: "cfg")
            }
            await plainClient.close()
            await client.close()
        }
    }

    @Test("put returns revisions, get returns the value with its headers, delete makes get return nil")
    func putGetDelete() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(scope)
            let client = try await NATSClient.connected(to: [server.url])
            let kv = try await client.keyValue(bucket: "values")

            let first = try await kv.put("a", value: [1, 2, 3])
            let second = try await kv.put("state.b", value: .text("two"), headers: NATSHeaders([("Origin", "h1")]))
            #expect(first == 1 && second == 2)

            let a = try #require(try await kv.get("a"))
            #expect(a.value == ByteBuffer(bytes: [1, 2, 3]))
            #expect(a.revision == first && a.operation == .put && a.key == "a" && a.bucket == "values")
            #expect(a.headers == nil)
            let created = try #require(a.created)
            #expect(abs(created.timeIntervalSinceNow) < 600, "the server's time stamp: \(created)")
            let b = try #require(try await kv.get("state.b"))
            #expect(b.headers == NATSHeaders([("Origin", "h1")]))
            #expect(try await kv.get("missing") == nil)

            let deletion = try await kv.delete("a")
            #expect(deletion == 3)
            #expect(try await kv.get("a") == nil)
            let third = try await kv.put("a", value: .text("again"))
            #expect(third == 4)
            #expect(try await kv.get("a").map { String(buffer: $0.value) } == "again")
            await client.close()
        }
    }

    @Test("a watch delivers the current entries, then the marker, then every change, in stream order")
    func watch() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(scope)
            let client = try await NATSClient.connected(to: [server.url])
            let kv = try await client.keyValue(bucket: "w")
            try await kv.put("a", value: .text("1"))
            try await kv.put("b", value: .text("1"))
            try await kv.put("a", value: .text("2"))
            try await kv.put("c", value: .text("1"))
            try await kv.delete("c")

            let all = WatchRecorder(try await kv.watch())
            #expect(try await all.wait(for: 4) == ["PUT b=1", "PUT a=2", "DEL c", "done"])
            let onlyA = WatchRecorder(try await kv.watch(keys: "a"))
            #expect(try await onlyA.wait(for: 2) == ["PUT a=2", "done"])

            try await kv.put("d.x", value: .text("1"), headers: NATSHeaders([("X-Origin", "host-1")]))
            try await kv.delete("b")
            try await kv.put("a", value: .text("3"))
            #expect(try await all.wait(for: 7) == ["PUT b=1", "PUT a=2", "DEL c", "done", "PUT d.x=1", "DEL b", "PUT a=3"])
            #expect(try await onlyA.wait(for: 3) == ["PUT a=2", "done", "PUT a=3"])
            let entries = all.all.compactMap { event -> NATSKeyValueEntry? in
                if case .entry(let entry) = event { entry } else { nil }
            }
            #expect(entries.map(\.revision) == [2, 3, 5, 6, 7, 8])
            #expect(entries[3].headers?["X-Origin"] == "host-1")
            #expect(entries[4].headers?[NATSKeyValue.operationHeader] == "DEL")
            #expect(entries.allSatisfy { $0.created != nil })

            // An empty bucket: the marker first.
            let empty = try await client.keyValue(bucket: "empty")
            let fresh = WatchRecorder(try await empty.watch())
            #expect(try await fresh.wait(for: 1) == ["done"])
            try await empty.put("k", value: .text("v"))
            #expect(try await fresh.wait(for: 2) == ["done", "PUT k=v"])

            await #expect(throws: NATSKeyValueError.invalidKey("a.>.b")) { try await kv.watch(keys: "a.>.b") }
            onlyA.watch.stop()
            #expect(try await onlyA.waitForEnd() == "finished")
            await client.close()
            #expect(try await all.waitForEnd().contains("closed"))
        }
    }

    @Test("a watch ends with bucketNotFound when its bucket is deleted and created again (its revisions start over)")
    func watchEndsWhenBucketIsReplaced() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(scope)
            let client = try await NATSClient.connected(to: [server.url])
            let kv = try await client.keyValue(bucket: "gone")
            for value in 1...3 { try await kv.put("k\(value)", value: .text("\(value)")) }
            let recorder = WatchRecorder(try await kv.watch())
            #expect(try await recorder.wait(for: 4) == ["PUT k1=1", "PUT k2=2", "PUT k3=3", "done"])
            try await client.deleteBucketStream("gone")
            // Created again before the watch misses its heartbeats: its revisions start over at 1, below the
            // watch's last (3), so going on from revision 4 would skip the new bucket's first changes.
            let again = try await client.keyValue(bucket: "gone")
            #expect(try await again.put("k1", value: .text("new")) == 1)
            let end = try await recorder.waitForEnd(timeout: 40)
            #expect(end == "failed: \(NATSKeyValueError.bucketNotFound("gone"))")
            #expect(recorder.summary == ["PUT k1=1", "PUT k2=2", "PUT k3=3", "done"])
            await client.close()
        }
    }

    @Test("a watch of a bucket replaced since it was opened fails with bucketNotFound at once; the bucket opened again is watched")
    func watchOfAReplacedOpening() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(scope)
            let client = try await NATSClient.connected(to: [server.url])
            let opened = try await client.keyValue(bucket: "swapped")
            try await opened.put("k", value: .text("old"))
            try await client.deleteBucketStream("swapped")
            let again = try await client.keyValue(bucket: "swapped")
            #expect(again.streamCreated != nil && again.streamCreated != opened.streamCreated)
            #expect(try await again.put("k", value: .text("new")) == 1)
            #expect(try await opened.isStreamOpened() == false)
            #expect(try await again.isStreamOpened() == true)
            // The user of `opened` knows revisions of the old stream: a watch of it must not go on in the new one.
            do {
                let stale = WatchRecorder(try await opened.watch())
                Issue.record("a watch of the replaced opening started: \(try await stale.wait(for: 1))")
            } catch {
                #expect("\(error)" == "\(NATSKeyValueError.bucketNotFound("swapped"))")
            }
            let fresh = WatchRecorder(try await again.watch())
            #expect(try await fresh.wait(for: 2) == ["PUT k=new", "done"])
            await client.close()
        }
    }

    @Test("a watch goes on across a nats-server kill and restart: no change lost, none delivered twice")
    func watchAcrossRestart() async throws {
        try await withIntegrationScope { scope in
            let server = try await jetStreamServer(scope)
            let port = server.port
            let watching = try await NATSClient.connected(to: [server.url], name: "watching")
            let writing = try await NATSClient.connected(to: [server.url], name: "writing")
            let writer = try await writing.keyValue(bucket: "restart")
            for value in 1...5 { try await writer.put("k\(value % 2)", value: .text("\(value)")) }
            let recorder = WatchRecorder(try await watching.keyValue(bucket: "restart").watch())
            #expect(try await recorder.wait(for: 3) == ["PUT k0=4", "PUT k1=5", "done"])
            // Each change to a key of its own too: a watch running behind the writer rightly skips a value the
            // bucket already replaced (k0=6 by a later k0=8).
            for value in 6...8 { try await writer.put("k\(value - 6)", value: .text("\(value)")) }
            try await recorder.wait(for: 6)

            try await server.kill()
            let restarted = try await jetStreamServer(scope, port: port)
            _ = try await poll("both clients to reconnect", timeout: 20) {
                watching.statistics.reconnects == 1 && writing.statistics.reconnects == 1 ? true : nil
            }
            // The writer may well write before the watch's consumer is back: those changes must come too. Each to
            // a key of its own: the bucket keeps one value per key, so a consumer recreated late would rightly
            // find only the last of several values of one key.
            for value in 9...15 { try await writer.put("after.\(value)", value: .text("\(value)")) }
            let events = try await recorder.wait(for: 13)
            let expected = ["PUT k0=4", "PUT k1=5", "done"] + (6...8).map { "PUT k\($0 - 6)=\($0)" }
                + (9...15).map { "PUT after.\($0)=\($0)" }
            #expect(events == expected)
            // Nothing more: a flush round trip through the watching client, then the count is still the same.
            try await watching.flush()
            try await writer.put("last", value: .text("x"))
            #expect(try await recorder.wait(for: 14).last == "PUT last=x")
            #expect(recorder.summary.count == 14, "\(recorder.summary)")
            let revisions = recorder.all.compactMap { event -> UInt64? in
                if case .entry(let entry) = event { entry.revision } else { nil }
            }
            #expect(revisions == [4, 5] + Array(6...16), "in stream order, each once")
            #expect(restarted.child.isRunning)
            recorder.watch.stop()
            await watching.close()
            await writing.close()
        }
    }
}
