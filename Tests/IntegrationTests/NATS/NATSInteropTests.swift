import Foundation
import NIOCore
import NotifyNATS
import NotifyTestSupport
import NotifyWire
import Testing

@Suite("NotifyNATS interoperability", .serialized)
struct NATSInteropTests {
    static let peerScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("nats_py_peer.py").path

    private func launchPeer(_ scope: IntegrationScope, _ arguments: [String]) async throws -> ChildProcess {
        let check = try scope.launchExecutable("/usr/bin/env", ["python3", "-c", "import nats"])
        guard try await check.waitForExit() == .exited(0) else {
            throw TestFailure("the nats-py client is missing: `make test-deps` installs it (pip install nats-py)")
        }
        return try scope.launchExecutable("/usr/bin/env", ["python3", Self.peerScript] + arguments)
    }

    @Test("nats-py publishes with headers and NotifyNATS receives them; NotifyNATS publishes and nats-py receives")
    func bothWays() async throws {
        try await withIntegrationScope { scope in
            let server = try await NATSServerProcess.start(in: scope)
            let client = try await NATSClient.connected(to: [server.url])
            let received = ReceivedMessages()
            _ = try client.subscribe("interop.to_swift", handler: received.handler)
            try await client.flush()
            let publisher = try await launchPeer(scope, [server.url, "pub", "interop.to_swift", "50"])
            let messages = try await received.wait(for: 50)
            #expect(try await publisher.waitForExit() == .exited(0))
            for (index, message) in messages.enumerated() {
                #expect(Array(buffer: message.payload) == [UInt8(index), 0, 255] + Array("py".utf8))
                #expect(message.headers?["Seq"] == String(index))
                #expect(message.headers?["From"] == "nats-py")
            }

            let subscriber = try await launchPeer(scope, [server.url, "sub", "interop.>", "3"])
            try await subscriber.waitForLine(containing: "ready", on: .stdout)
            try client.publish("interop.a", payload: ByteBuffer(bytes: [1, 2, 3]))
            try client.publish("interop.b", payload: ByteBuffer(), headers: NATSHeaders([("Notifyd-Origin-Host", "h1")]))
            try client.publish("interop.c.d", payload: ByteBuffer(string: "\r\n"), headers: NATSHeaders([("A", "1"), ("B", "2")]))
            let lines = try await subscriber.waitForStdoutLines(4)
            #expect(try await subscriber.waitForExit() == .exited(0))
            struct Line: Decodable {
                var subject: String
                var data: String
                var headers: [String: String]
            }
            let decoded = try lines.dropFirst().map { try JSONDecoder().decode(Line.self, from: Data($0.utf8)) }
            #expect(decoded.map(\.subject) == ["interop.a", "interop.b", "interop.c.d"])
            #expect(decoded.map(\.data) == ["010203", "", "0d0a"])
            #expect(decoded.map(\.headers) == [[:], ["Notifyd-Origin-Host": "h1"], ["A": "1", "B": "2"]])
            await client.close()
        }
    }

    /// Runs a nats-py key-value command and returns the JSON line it prints.
    private func peerKeyValue(_ scope: IntegrationScope, _ arguments: [String]) async throws -> [String: Any] {
        let peer = try await launchPeer(scope, arguments)
        guard try await peer.waitForExit(timeout: 30) == .exited(0) else {
            throw TestFailure("nats_py_peer.py \(arguments) failed\n\(peer.diagnostics)")
        }
        let line = try await peer.waitForStdoutLines(1).last ?? ""
        guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw TestFailure("nats_py_peer.py \(arguments) printed '\(line)'")
        }
        return object
    }

    @Test("a bucket NotifyNATS creates: nats-py reads what we put (headers too) and we watch what nats-py puts")
    func keyValueCreatedBySwift() async throws {
        try await withIntegrationScope { scope in
            let server = try await NATSServerProcess.start(in: scope, jetStreamDirectory: scope.directory + "/js")
            let client = try await NATSClient.connected(to: [server.url])
            let kv = try await client.keyValue(bucket: "shared")
            let revision = try await kv.put("state.greeting", value: [0, 1, 255], headers: NATSHeaders([("Origin", "swift")]))
            let read = try await peerKeyValue(scope, [server.url, "kv-get", "shared", "state.greeting"])
            #expect(read["value"] as? String == "0001ff")
            #expect(read["revision"] as? Int == Int(revision))
            #expect(read["headers"] as? [String: String] == ["Origin": "swift"])
            try await kv.delete("state.greeting")
            #expect(try await peerKeyValue(scope, [server.url, "kv-get", "shared", "state.greeting"])["missing"] as? Bool == true)

            let recorder = WatchRecorder(try await kv.watch())
            #expect(try await recorder.wait(for: 2) == ["DEL state.greeting", "done"])
            _ = try await peerKeyValue(scope, [server.url, "kv-put", "shared", "bind", "from.py", "6869", "A=1", "B=two words"])
            _ = try await peerKeyValue(scope, [server.url, "kv-put", "shared", "bind", "plain", "00"])
            let events = try await recorder.wait(for: 4)
            #expect(events == ["DEL state.greeting", "done", "PUT from.py=hi", "PUT plain=\u{0}"])
            guard case .entry(let entry) = recorder.all[2] else { throw TestFailure("not an entry: \(recorder.all[2])") }
            #expect(entry.headers == NATSHeaders([("A", "1"), ("B", "two words")]))
            recorder.watch.stop()
            await client.close()
        }
    }

    @Test("a bucket nats-py creates: NotifyNATS binds it, reads it (no direct get) and watches puts and deletes")
    func keyValueCreatedByPython() async throws {
        try await withIntegrationScope { scope in
            let server = try await NATSServerProcess.start(in: scope, jetStreamDirectory: scope.directory + "/js")
            _ = try await peerKeyValue(scope, [server.url, "kv-put", "pyside", "create", "k1", "7631"])
            let client = try await NATSClient.connected(to: [server.url])
            let kv = try await client.keyValue(bucket: "pyside", createIfMissing: false)
            #expect(try await kv.get("k1").map { String(buffer: $0.value) } == "v1")
            let recorder = WatchRecorder(try await kv.watch())
            #expect(try await recorder.wait(for: 2) == ["PUT k1=v1", "done"])
            _ = try await peerKeyValue(scope, [server.url, "kv-put", "pyside", "bind", "k2", "7632", "Notifyd-Origin-Host=h2"])
            _ = try await peerKeyValue(scope, [server.url, "kv-delete", "pyside", "k1"])
            #expect(try await recorder.wait(for: 4) == ["PUT k1=v1", "done", "PUT k2=v2", "DEL k1"])
            guard case .entry(let entry) = recorder.all[2] else { throw TestFailure("not an entry") }
            #expect(entry.headers?["Notifyd-Origin-Host"] == "h2")
            #expect(try await kv.get("k2")?.headers?["Notifyd-Origin-Host"] == "h2")
            #expect(try await kv.get("k1") == nil)
            recorder.watch.stop()
            await client.close()
        }
    }

    @Test("notifyd's pattern matching and NATS's subject matching agree on 100,000 random (name, pattern) pairs")
    func matchingAgrees() async throws {
        try await withIntegrationScope { scope in
            let server = try await NATSServerProcess.start(in: scope)
            let client = try await NATSClient.connected(to: [server.url], echo: true)
            var generator = SystemRandomNumberGenerator()
            // Every label character class of PROTOCOL.md § 8: all of them are ordinary subject characters to NATS.
            let labels = ["a", "b", "c", "é", "x-y", "k:v@h+1=2", "😀", "_"]
            func randomName() -> String {
                (0..<Int.random(in: 1...4, using: &generator)).map { _ in labels.randomElement(using: &generator)! }
                    .joined(separator: ".")
            }
            func randomPattern() -> String {
                let count = Int.random(in: 1...4, using: &generator)
                var parts = (0..<count).map { _ in
                    Int.random(in: 0..<4, using: &generator) == 0 ? "*" : labels.randomElement(using: &generator)!
                }
                if Int.random(in: 0..<4, using: &generator) == 0 { parts[count - 1] = ">" }
                return parts.joined(separator: ".")
            }
            let patterns = (0..<250).map { _ in randomPattern() }
            let names = (0..<400).map { _ in randomName() }
            // Each pattern gets its own subscription; every name is published once with its index as payload.
            let hits = Locked<Set<[Int]>>([])
            for (patternIndex, pattern) in patterns.enumerated() {
                _ = try client.subscribe("m." + pattern) { message in
                    let nameIndex = Int(String(buffer: message.payload))!
                    _ = hits.withLock { $0.insert([patternIndex, nameIndex]) }
                }
            }
            try await client.flush()
            for (index, name) in names.enumerated() {
                try client.publish("m." + name, payload: ByteBuffer(string: String(index)))
            }
            var expected = Set<[Int]>()
            for (p, pattern) in patterns.enumerated() {
                let notifydPattern = try NotificationPattern(pattern)
                for (n, name) in names.enumerated() where notifydPattern.matches(name) { expected.insert([p, n]) }
                for name in names {
                    #expect(
                        NATSSubject.matches(subject: name, pattern: pattern) == notifydPattern.matches(name),
                        "\(name) ~ \(pattern)")
                }
            }
            try await client.flush()
            _ = try await poll("\(expected.count) deliveries", timeout: 30) {
                hits.withLock { $0.count } >= expected.count ? true : nil
            }
            try await client.flush()
            #expect(hits.withLock { $0 } == expected, "NATS and notifyd disagree on some (pattern, name) pairs")
            #expect(patterns.count * names.count == 100_000)
            await client.close()
        }
    }
}
