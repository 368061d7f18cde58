#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// A daemon hands everything to a successor (as `notifyd --replace` asks, over the control socket): the clients'
/// connections stay open and nothing about them changes. In-process: both servers and the clients run here.
@Suite("Hand-over to a successor", .timeLimit(.minutes(TestScale.minutes(2))))
struct HandoverTests {
    /// Asks the server at `path` for everything, as `notifyd --replace` does (blocking calls, on a thread).
    static func takeOver(_ path: String) async throws -> (IncomingHandover, listener: CInt) {
        try await withCheckedThrowingContinuation { continuation in
            Thread {
                do throws(ReplaceChannel.Failure) {
                    guard let taken = try ReplaceChannel.takeOver(controlPath: ReplaceChannel.controlPath(for: path)) else {
                        continuation.resume(throwing: TestFailure("no daemon to replace at \(path)"))
                        return
                    }
                    continuation.resume(returning: taken)
                } catch {
                    continuation.resume(throwing: TestFailure("take-over failed: \(error)"))
                }
            }.start()
        }
    }

    /// Starts the successor on what `first` handed over.
    static func successor(of first: TestServer) async throws -> TestServer {
        let path = first.socketPath
        let (incoming, listener) = try await takeOver(path)
        try await first.waitUntilFinished()
        return try await TestServer.start(socketPath: path, handover: incoming) {
            $0.listenAddress = .inheritedDescriptor(listener, path: path)
        }
    }

    /// The notifications on `client` until `count` came, as (sequence, payload).
    static func notifications(_ count: Int, on client: TestClient) async throws -> [(UInt64, String)] {
        var result: [(UInt64, String)] = []
        while result.count < count {
            let frame = try await client.next()
            guard case .notification(let notification) = frame else {
                throw TestFailure("'\(client.name)' expected a notification, got \(frame.summary) after \(result.count)")
            }
            result.append((notification.sequence, String(buffer: notification.payload)))
        }
        return result
    }

    @Test("connections, subscriptions, suspension, state, retained values and sequence numbers all carry over")
    func everythingCarriesOver() async throws {
        let first = try await TestServer.start()
        let subscriber = try await first.connect("subscriber")
        try await subscriber.subscribe("handover.name", id: 1, policy: .queue(limit: 10_000))
        try await subscriber.subscribe("handover.*", id: 2)
        let suspended = try await first.connect("suspended")
        try await suspended.subscribe("handover.name", id: 5, policy: .queue(limit: 10_000))
        _ = try await suspended.expectOK("SUSPEND") { .suspend(requestID: $0) }
        let poster = try await first.connect("poster")
        try await poster.setState("handover.state", 42)
        try await poster.post("handover.kept", "kept", retain: true)
        for index in 0..<100 { try await poster.postUnacknowledged("handover.name", ByteBuffer(string: "before \(index)")) }
        _ = try await poster.barrier()
        let before = try await first.status()

        let (incoming, listener) = try await Self.takeOver(first.socketPath)
        try await first.waitUntilFinished()
        // The gap: nobody reads these yet; they wait in the poster's socket.
        for index in 0..<100 { try await poster.postUnacknowledged("handover.name", ByteBuffer(string: "gap \(index)")) }
        let second = try await TestServer.start(socketPath: first.socketPath, handover: incoming) {
            $0.listenAddress = .inheritedDescriptor(listener, path: first.socketPath)
        }
        for index in 0..<100 { try await poster.postUnacknowledged("handover.name", ByteBuffer(string: "after \(index)")) }
        _ = try await poster.barrier()

        let expected = (0..<100).map { "before \($0)" } + (0..<100).map { "gap \($0)" } + (0..<100).map { "after \($0)" }
        // The retained post came first (handover.* matched it), then the 300, numbered without a gap.
        let received = try await Self.notifications(301, on: subscriber)
        #expect(received.first?.1 == "kept")
        #expect(received.dropFirst().map(\.1) == expected)
        let sequences = received.map(\.0)
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $1 == $0 + 1 }, "sequence numbers: \(sequences)")
        try await subscriber.expectQuiet("no WELCOME, GOODBYE or anything else after the hand-over")

        _ = try await suspended.expectOK("RESUME") { .resume(requestID: $0) }
        #expect(try await Self.notifications(300, on: suspended).map(\.1) == expected)

        #expect(try await poster.state(of: "handover.state") == 42)
        let late = try await second.connect("late")
        let retained = try await late.subscribe("handover.kept", id: 1, retained: true)
        #expect(retained.count == 1, "the retained notification carried over: \(retained.map(\.summary))")

        let after = try await second.status()
        #expect(after.instanceID == before.instanceID, "a hand-over is not a restart")
        #expect(after.posts == before.posts + 200)
        #expect(after.connections == 4)
        #expect(after.subscriptions == before.subscriptions + 1)
        #expect(after.stateNames == 1)
        #expect(after.retainedNames == 1)
        let clients = try await late.query([DaemonClient].self, .clients)
        #expect(Set(clients.map(\.clientName)) == ["late", "poster", "subscriber", "suspended"])
        #expect(clients.first { $0.clientName == "suspended" }?.suspended == false)

        try await second.stop()
        let goodbye = try await subscriber.next()
        guard case .goodbye = goodbye else {
            Issue.record("the successor's own stop still says GOODBYE, got \(goodbye.summary)")
            return
        }
    }

    @Test("state subscriptions carry over: the watcher keeps receiving changes, counted and unsubscribable as before")
    func stateSubscriptionsCarryOver() async throws {
        let first = try await TestServer.start()
        let watcher = try await first.connect("watcher")
        try await watcher.watchStates("handover.*", id: 3)
        try await watcher.subscribe("handover.*", id: 4)
        let setter = try await first.connect("setter")
        try await setter.setState("handover.level", 1)
        #expect(try await watcher.nextStateChange().value == 1)

        let second = try await Self.successor(of: first)
        try await setter.setState("handover.level", 2)
        let change = try await watcher.nextStateChange()
        #expect(change.value == 2 && change.name == "handover.level" && !change.isCurrent, "still a state subscription")
        try await setter.post("handover.level", "posted")
        #expect(try await watcher.nextNotification().payloadText == "posted", "and the other one still notifications only")
        try await watcher.expectQuiet("one frame each")
        #expect(try await second.status().subscriptions == 2)

        try await watcher.unsubscribe(id: 3)
        try await setter.setState("handover.level", 3)
        try await watcher.expectQuiet("the restored state subscription is removed like any other")
        try await second.stop()
    }

    @Test("marking subscriptions and retained origins carry over: RETAINED(0) still marks, send-retained keeps the origin")
    func markingAndRetainedOriginCarryOver() async throws {
        let origin = RelayOrigin(host: "web-1", uid: 1_000, gid: 100, pid: 4_242, sequence: 77)
        let first = try await TestServer.start()
        let marker = try await first.connect("marker")
        try await marker.expectOK("SUBSCRIBE marks-retained") {
            .testSubscribe(requestID: $0, subscriptionID: 3, name: "handover.>", flags: .marksRetained)
        }
        let relay = try await first.connect("relay")
        let (posted, _) = try await relay.request {
            .post(
                ClientFrame.Post(
                    requestID: $0, flags: [.ackWanted, .retain], name: "handover.relayed", payload: ByteBuffer(string: "r"),
                    origin: origin))
        }
        #expect(posted.summary.hasPrefix("POSTED("))
        #expect(try await marker.next().retainedRequestID == 0)

        let second = try await Self.successor(of: first)
        try await relay.post("handover.config", "v2", retain: true)
        let marked = try await marker.next()
        #expect(marked.retainedRequestID == 0 && marked.anyNotification?.payloadText == "v2", "still marking: \(marked.summary)")
        try await relay.post("handover.config", "plain")
        #expect(try await marker.nextNotification().payloadText == "plain", "a plain post stays a NOTIFICATION")

        // The predecessor's retained notification keeps its origin in the successor's store.
        let late = try await second.connectRaw("late")
        try await late.send(.hello(ClientFrame.Hello(flags: HelloFlags.origins, clientName: "late")))
        guard case .welcome = try await late.next() else { throw TestFailure("no WELCOME") }
        let current = try await late.expectOK("SUBSCRIBE send-retained") {
            .testSubscribe(requestID: $0, subscriptionID: 1, name: "handover.relayed", flags: .sendRetained)
        }
        #expect(current.count == 1 && current.first?.anyNotification?.origin == origin, "\(current.map(\.summary))")
        try await second.stop()
    }

    @Test("posts waiting in an early connection's socket reach the subscribers of every later connection")
    func gapPostsReachLaterConnections() async throws {
        let first = try await TestServer.start()
        // The poster's connection is older than every subscriber's, so the successor restores it first.
        let poster = try await first.connect("poster")
        var subscribers: [TestClient] = []
        for index in 0..<40 {
            let subscriber = try await first.connect("subscriber \(index)")
            try await subscriber.subscribe("handover.gap", id: 1, policy: .queue(limit: 1_000))
            subscribers.append(subscriber)
        }
        let (incoming, listener) = try await Self.takeOver(first.socketPath)
        try await first.waitUntilFinished()
        // Waiting in the poster's socket: the successor reads them as soon as it serves the poster.
        for index in 0..<20 { try await poster.postUnacknowledged("handover.gap", ByteBuffer(string: "gap \(index)")) }
        let second = try await TestServer.start(socketPath: first.socketPath, handover: incoming) {
            $0.listenAddress = .inheritedDescriptor(listener, path: first.socketPath)
        }
        _ = try await poster.barrier()
        let expected = (0..<20).map { "gap \($0)" }
        for subscriber in subscribers {
            #expect(try await Self.notifications(20, on: subscriber).map(\.1) == expected, "\(subscriber.name)")
        }
        try await second.stop()
    }

    @Test("bytes owed to a client that stopped reading are written by the successor, from where the first stopped")
    func owedBytesCarryOver() async throws {
        let first = try await TestServer.start()
        let stalled = try await first.connect("stalled", receiveBufferSize: 4_096)
        try await stalled.subscribe("handover.big", id: 1, policy: .queue(limit: 100_000))
        try await stalled.setReading(false)
        let poster = try await first.connect("poster")
        let payload = String(repeating: "x", count: 1_000)
        // About 2 MB: more than the socket buffers hold, so some is left with the daemon, part of a frame written.
        for index in 0..<2_000 {
            try await poster.postUnacknowledged("handover.big", ByteBuffer(string: "\(index) \(payload)"))
        }
        _ = try await poster.barrier()
        let pending = try await first.waitForSnapshot("bytes pending for the stalled client") { snapshot in
            snapshot.clients.contains { $0.clientName == "stalled" && $0.pendingBytes > 0 }
        }
        #expect(pending.clients.contains { $0.pendingBytes > 0 })

        let second = try await Self.successor(of: first)
        try await stalled.setReading(true)
        let received = try await Self.notifications(2_000, on: stalled)
        #expect(received.map { $0.1.prefix { $0 != " " } } == (0..<2_000).map { Substring("\($0)") })
        let sequences = received.map(\.0)
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $1 == $0 + 1 })
        try await second.stop()
    }

    @Test("a snapshot that cannot be read: each handed-over client gets GOODBYE, the daemon serves on")
    func unreadableSnapshot() async throws {
        var pair: [CInt] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { close(pair[1]) }
        let incoming = IncomingHandover(snapshotBytes: Array("NTFYSNAP garbage".utf8), clientSockets: [pair[0]], ownsSocketFile: false)
        guard case .failure = incoming.snapshot else {
            Issue.record("garbage decoded as a snapshot")
            return
        }
        let server = try await TestServer.start(socketPath: TestServer.makeSocketPath(), handover: incoming)
        var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 20)
        var buffer = [UInt8](repeating: 0, count: 4_096)
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(pair[1], SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var frames: [ServerFrame] = []
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(pair[1], $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            accumulator.append(ByteBuffer(bytes: buffer.prefix(count)))
            while let frame = try accumulator.next() { frames.append(frame) }
        }
        #expect(frames.count == 1)
        guard case .goodbye = frames.first else {
            Issue.record("expected GOODBYE, got \(frames.map(\.summary))")
            return
        }
        let client = try await server.connect("fresh")
        _ = try await client.barrier()
        try await server.stop()
    }

    @Test("a client that left during the hand-over is not restored, and its user is not charged for it")
    func clientGoneDuringHandover() async throws {
        var snapshot = HandoverSnapshotTests.sample
        snapshot.peers = [snapshot.peers[0]]  // a record whose socket was never passed
        let incoming = IncomingHandover(snapshotBytes: snapshot.encoded(), clientSockets: [], ownsSocketFile: false)
        let server = try await TestServer.start(socketPath: TestServer.makeSocketPath(), handover: incoming)
        let status = try await server.status()
        #expect(status.connections == 0)
        #expect(status.subscriptions == 0)
        #expect(status.stateNames == 2, "the daemon-wide state carried over")
        #expect(status.posts == 4_242)
        let client = try await server.connect("next")
        let posted = try await client.post("after.handover")
        #expect(posted.sequence == 4_243, "sequence numbers go on from the snapshot's")
        try await server.stop()
    }
}
