import Foundation
import NIOCore
import NotifyNATS
import NotifyTestSupport
import Testing

/// Messages a subscription handler received, waited for by count.
final class ReceivedMessages: Sendable {
    private let messages = Locked<[NATSMessage]>([])

    var handler: @Sendable (NATSMessage) -> Void { { message in self.messages.withLock { $0.append(message) } } }
    var all: [NATSMessage] { messages.withLock { $0 } }

    @discardableResult
    func wait(for count: Int, timeout: Double = 20) async throws -> [NATSMessage] {
        do {
            return try await poll("\(count) NATS message(s)", timeout: timeout) {
                let now = all
                return now.count >= count ? now : nil
            }
        } catch {
            let now = all
            let subjects = Dictionary(grouping: now, by: \.subject).mapValues(\.count)
            throw TestFailure("\(error); received \(now.count): \(subjects)")
        }
    }
}

extension NATSClient {
    static func connected(
        to urls: [String], name: String = "test", echo: Bool = true, maxPendingBytes: Int = 8 << 20
    ) async throws -> NATSClient {
        let client = NATSClient(
            configuration: .init(
                servers: try urls.map { try NATSServerAddress(url: $0) }, name: name, echo: echo,
                maxPendingBytes: maxPendingBytes, reconnectMaxDelay: .milliseconds(200)))
        try await client.waitUntilConnected(timeout: .seconds(20))
        return client
    }
}

@Suite("NATS client against nats-server", .serialized)
struct NATSClientTests {
    @Test("publish and subscribe with headers, wildcards and unsubscribe, through a real server")
    func publishSubscribe() async throws {
        try await withIntegrationScope { scope in
            let server = try await NATSServerProcess.start(in: scope)
            let client = try await NATSClient.connected(to: [server.url])
            let exact = ReceivedMessages()
            let wild = ReceivedMessages()
            let exactSub = try client.subscribe("a.b", handler: exact.handler)
            _ = try client.subscribe("a.>", handler: wild.handler)
            try await client.flush()

            try client.publish("a.b", payload: ByteBuffer(string: "one"), headers: NATSHeaders([("K", "v1")]))
            try client.publish("a.c.d", payload: ByteBuffer(bytes: [0, 13, 10, 255]))
            try await wild.wait(for: 2)
            let first = try await exact.wait(for: 1)
            #expect(first.map { String(buffer: $0.payload) } == ["one"])
            #expect(first.first?.headers?["K"] == "v1")
            #expect(wild.all.map(\.subject) == ["a.b", "a.c.d"])
            #expect(Array(buffer: wild.all[1].payload) == [0, 13, 10, 255])
            #expect(wild.all[1].headers == nil)

            client.unsubscribe(exactSub)
            try client.publish("a.b", payload: ByteBuffer(string: "two"))
            try client.publish("a.marker", payload: ByteBuffer(string: "after"))
            try await wild.wait(for: 4)
            // The marker came after "two" from the same connection: an unsubscribed handler would have had it.
            #expect(exact.all.count == 1)

            #expect(throws: NATSClientError.invalidSubject("a.*")) { try client.publish("a.*", payload: ByteBuffer()) }
            #expect(throws: NATSClientError.invalidSubject("a b")) { try client.publish("a b", payload: ByteBuffer()) }
            await client.close()
        }
    }

    @Test("a payload over the server's max_payload is refused with the limit, before it is sent")
    func maxPayload() async throws {
        try await withIntegrationScope { scope in
            let config = scope.directory + "/nats.conf"
            try "max_payload: 1000\n".write(toFile: config, atomically: true, encoding: .utf8)
            let server = try await NATSServerProcess.start(in: scope, arguments: ["-c", config])
            let client = try await NATSClient.connected(to: [server.url])
            #expect(client.maxPayload == 1000)
            #expect(throws: NATSClientError.payloadTooLarge(size: 1001, limit: 1000)) {
                try client.publish("x", payload: ByteBuffer(repeating: 1, count: 1001))
            }
            let received = ReceivedMessages()
            _ = try client.subscribe("x", handler: received.handler)
            try await client.flush()
            try client.publish("x", payload: ByteBuffer(repeating: 1, count: 1000))
            try await received.wait(for: 1)
            #expect(client.statistics.serverErrors == 0)
            await client.close()
        }
    }

    @Test("user and password, and token: right credentials connect, wrong ones are reported and retried")
    func authentication() async throws {
        try await withIntegrationScope { scope in
            let userServer = try await NATSServerProcess.start(in: scope, arguments: ["--user", "alice", "--pass", "s3cret"])
            let good = try await NATSClient.connected(to: ["nats://alice:s3cret@127.0.0.1:\(userServer.port)"])
            await good.close()

            let bad = NATSClient(
                configuration: .init(servers: [try NATSServerAddress(url: "nats://alice:wrong@127.0.0.1:\(userServer.port)")]))
            _ = try await poll("the server's authorization error", timeout: 20) {
                bad.statistics.serverErrors > 0 ? true : nil
            }
            var events = bad.events.makeAsyncIterator()
            #expect(await events.next() == .serverError("Authorization Violation"))
            #expect(!bad.isConnected)
            await bad.close()

            let tokenServer = try await NATSServerProcess.start(in: scope, arguments: ["--auth", "t0ken"])
            let withToken = try await NATSClient.connected(to: ["nats://t0ken@127.0.0.1:\(tokenServer.port)"])
            await withToken.close()
        }
    }

    @Test("a server killed mid-stream: the client reconnects, resubscribes, sends what waited, and counts what it dropped")
    func reconnect() async throws {
        try await withIntegrationScope { scope in
            let server = try await NATSServerProcess.start(in: scope)
            let port = server.port
            // Room for about 100 of the 1,000-byte messages below while the server is away.
            let client = try await NATSClient.connected(to: [server.url], maxPendingBytes: 100_000)
            let received = ReceivedMessages()
            _ = try client.subscribe("stream.>", handler: received.handler)
            try await client.flush()
            try client.publish("stream.before", payload: ByteBuffer(string: "1"))
            try await received.wait(for: 1)

            try await server.kill()
            _ = try await poll("the client to notice the lost connection", timeout: 20) { client.isConnected ? nil : true }
            let payload = ByteBuffer(repeating: 7, count: 1_000)
            var accepted = 0
            for _ in 0..<300 where try client.publish("stream.during", payload: payload) { accepted += 1 }
            #expect(accepted > 50 && accepted < 300, "the outbox should take about 100 messages, took \(accepted)")
            #expect(client.statistics.dropped == UInt64(300 - accepted))

            // Kept in a variable to the end: releasing a ChildProcess kills its process.
            let restarted = try await NATSServerProcess.start(in: scope, port: port)
            try await client.waitUntilConnected(timeout: .seconds(20))
            // Resubscribed: what waited in the outbox and what is published now both arrive.
            try client.publish("stream.after", payload: ByteBuffer(string: "2"))
            let all: [NATSMessage]
            do {
                all = try await received.wait(for: 1 + accepted + 1)
            } catch {
                throw TestFailure("\(error); accepted \(accepted), statistics \(client.statistics)")
            }
            #expect(all.filter { $0.subject == "stream.during" }.count == accepted)
            #expect(all.last?.subject == "stream.after")
            #expect(client.statistics.reconnects == 1)
            #expect(restarted.child.isRunning)
            await client.close()
        }
    }

    @Test("the client learns the cluster's other servers from INFO and fails over to them")
    func clusterFailover() async throws {
        try await withIntegrationScope { scope in
            let seed = try await NATSServerProcess.start(
                in: scope, arguments: ["--cluster_name", "t", "--cluster", "nats://127.0.0.1:-1"])
            let routeLine = try await seed.child.waitForLine(containing: "Listening for route connections on")
            let routePort = String(routeLine.split(separator: ":").last ?? "")
            let peer = try await NATSServerProcess.start(
                in: scope,
                arguments: ["--cluster_name", "t", "--cluster", "nats://127.0.0.1:-1", "--routes", "nats://127.0.0.1:\(routePort)"])
            try await seed.child.waitForLine(containing: "Route connection created")
            // Configured with the seed only.
            let client = try await NATSClient.connected(to: [seed.url])
            let received = ReceivedMessages()
            _ = try client.subscribe("fail.over", handler: received.handler)
            try await client.flush()
            // The seed's INFO names the peer once the route is up; wait until the client has it.
            try await seed.kill()
            try await client.waitUntilConnected(timeout: .seconds(20))
            let other = try await NATSClient.connected(to: [peer.url])
            _ = try await poll("the resubscription to reach the peer", timeout: 20) { () async throws -> Bool? in
                try other.publish("fail.over", payload: ByteBuffer(string: "x"))
                try await other.flush()
                return received.all.isEmpty ? nil : true
            }
            await other.close()
            await client.close()
        }
    }
}
