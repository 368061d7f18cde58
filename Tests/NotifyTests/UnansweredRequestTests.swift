import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NotifyTestSupport
import NotifyWire
import Testing

@testable import Notify

/// Requests to a daemon that does not answer, or answers with the wrong kind of frame: the caller is never left
/// waiting for good, and a suspension its caller was told had failed is not replayed.
@Suite("Unanswered requests", .timeLimit(.minutes(TestScale.minutes(2))))
struct UnansweredRequestTests {
    /// How the fake daemon answers a request.
    enum Answer: Sendable {
        case never
        /// `OK` whatever the request (a `PING` expects `PONG`).
        case okToEverything
        /// Welcomes, then reads nothing more (a daemon stopped with SIGSTOP, as seen from its socket).
        case stopReading
    }

    /// Welcomes every connection and answers requests as `answer` says; records each connection's frames.
    final class FakeDaemon: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        private let answer: Answer
        private var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: 1 << 20)
        /// The frames of each connection, by connection (the handler is made per connection, sharing this).
        let frames: Collector<String>
        let connection: Int

        init(answer: Answer, frames: Collector<String>, connection: Int) {
            self.answer = answer
            self.frames = frames
            self.connection = connection
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            accumulator.append(unwrapInboundIn(data))
            var out = context.channel.allocator.buffer(capacity: 256)
            while let frame = try? accumulator.next() {
                switch frame {
                case .hello:
                    frames.append("\(connection) HELLO")
                    ServerFrame.welcome(
                        .init(daemonPID: 1, instanceID: InstanceID(high: 1, low: 1), limits: .default, serverName: "fake"))
                        .encode(into: &out)
                    if case .stopReading = answer {
                        context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
                    }
                case .ping(let requestID):
                    frames.append("\(connection) PING")
                    if case .okToEverything = answer { ServerFrame.ok(requestID: requestID).encode(into: &out) }
                case .suspend:
                    frames.append("\(connection) SUSPEND")
                default:
                    break
                }
            }
            context.writeAndFlush(wrapOutboundOut(out), promise: nil)
        }
    }

    /// A fake daemon on a fresh path; `close` ends every connection it has (the center then reconnects).
    final class FakeServer: Sendable {
        let path: String
        let frames = Collector<String>()
        private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        private let server: NIOLockedValueBox<Channel?> = NIOLockedValueBox(nil)
        private let children = NIOLockedValueBox<[Channel]>([])

        init(answer: Answer) async throws {
            path = TestServer.makeSocketPath()
            try FileManager.default.createDirectory(
                atPath: String(path[..<path.lastIndex(of: "/")!]), withIntermediateDirectories: true)
            let frames = self.frames
            let children = self.children
            let channel = try await ServerBootstrap(group: group)
                .childChannelInitializer { channel in
                    let number = children.withLockedValue { list in
                        list.append(channel)
                        return list.count
                    }
                    return channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            FakeDaemon(answer: answer, frames: frames, connection: number))
                    }
                }
                .bind(unixDomainSocketPath: path).get()
            server.withLockedValue { $0 = channel }
        }

        func closeConnections() {
            for child in children.withLockedValue({ $0 }) { child.close(promise: nil) }
        }

        func stop() async throws {
            try await server.withLockedValue { $0 }?.close()
            try await group.shutdownGracefully()
            try? FileManager.default.removeItem(atPath: String(path[..<path.lastIndex(of: "/")!]))
        }
    }

    /// Runs `body` in a task and returns its outcome, or `nil` if it has not finished within `seconds`.
    static func outcome<T: Sendable>(
        within seconds: Double, of task: Task<T, Error>
    ) async throws -> Result<T, Error>? {
        let done = Collector<Result<T, Error>>()
        Task { done.append(await task.result) }
        return try? await done.wait(for: 1, timeout: seconds, "the request's end").first
    }

    @Test("a request to a daemon that never answers ends when its task is cancelled")
    func cancelledWhileWaiting() async throws {
        let daemon = try await FakeServer(answer: .never)
        let center = try await NotifyCenter.connect(
            configuration: NotifyCenter.Configuration(socketPath: daemon.path, clientName: "t"))
        let task = Task { try await center.synchronize() }
        _ = try await daemon.frames.wait(for: 2, "HELLO and PING")
        task.cancel()
        let outcome = try await Self.outcome(within: 10, of: task)
        switch outcome {
        case nil: Issue.record("synchronize() still waits 10 s after its task was cancelled")
        case .success: Issue.record("synchronize() succeeded without a PONG")
        case .failure(let error): #expect(error is CancellationError, "\(error)")
        }
        await center.close()
        try await daemon.stop()
    }

    @Test("an answer of the wrong kind fails the request and closes the connection")
    func wrongKindOfAnswer() async throws {
        let daemon = try await FakeServer(answer: .okToEverything)
        let center = try await NotifyCenter.connect(
            configuration: NotifyCenter.Configuration(socketPath: daemon.path, clientName: "t", reconnect: .never))
        let outcome = try await Self.outcome(within: 10, of: Task { try await center.synchronize() })
        switch outcome {
        case nil: Issue.record("synchronize() still waits 10 s after an OK answered its PING")
        case .success: Issue.record("synchronize() succeeded on an OK")
        case .failure(let error):
            #expect("\(error)".contains("protocol error"), "\(error)")
        }
        await center.close()
        try await daemon.stop()
    }

    @Test("a suspend() that fails with its connection is not replayed on the next one")
    func failedSuspensionIsNotReplayed() async throws {
        let daemon = try await FakeServer(answer: .never)
        let center = try await NotifyCenter.connect(
            configuration: NotifyCenter.Configuration(socketPath: daemon.path, clientName: "t"))
        let suspension = Task { try await center.suspend() }
        _ = try await daemon.frames.wait(for: 2, "HELLO and SUSPEND")
        daemon.closeConnections()
        let outcome = try await Self.outcome(within: 10, of: suspension)
        guard case .failure = outcome else {
            Issue.record("suspend() should fail with its connection, got \(String(describing: outcome))")
            await center.close()
            try await daemon.stop()
            return
        }
        // The next connection: its HELLO, then a barrier that the fake never answers (its PING shows that every
        // frame sent before it has arrived).
        try await center.waitUntilConnected(timeout: TestScale.timeout(10))
        let barrier = Task { try await center.synchronize() }
        _ = try await daemon.frames.wait(for: 4, "the second connection's HELLO and PING")
        #expect(daemon.frames.values.filter { $0.hasPrefix("2 ") } == ["2 HELLO", "2 PING"], "\(daemon.frames.values)")
        barrier.cancel()
        await center.close()
        try await daemon.stop()
    }

    @Test("posting to a daemon that stops reading: past outgoingLimit post() throws daemonNotReading, memory stays bounded")
    func postsToADaemonThatStopsReading() async throws {
        let daemon = try await FakeServer(answer: .stopReading)
        var configuration = NotifyCenter.Configuration(socketPath: daemon.path, clientName: "t")
        configuration.outgoingLimit = 4 << 20
        let center = try await NotifyCenter.connect(configuration: configuration)
        let payload = [UInt8](repeating: 7, count: 1_024)
        var sent = 0
        var refusal: NotifyError?
        // 200 MiB of posts at most; the limit (4 MiB), the channel's 4 MiB and the socket's buffers come far sooner.
        while sent < 200_000, refusal == nil {
            do {
                try center.post("org.example.flood", payload: payload)
                sent += 1
            } catch {
                refusal = (error as? NotifyError) ?? .closed
            }
        }
        guard case .daemonNotReading(let queued)? = refusal else {
            Issue.record("\(sent) posts of 1 KiB queued for a daemon that reads nothing, and no error: \(String(describing: refusal))")
            await center.close()
            try await daemon.stop()
            return
        }
        #expect(queued >= 4 << 20 && sent < 32 * 1_024, "refused after \(sent) posts with \(queued) bytes queued")
        await #expect(throws: NotifyError.self) { try await center.synchronize() }
        await center.close()
        try await daemon.stop()
    }

    @Test("waiting for a connection (waitUntilConnected, or a request while disconnected) ends when the task is cancelled")
    func cancelledWhileDisconnected() async throws {
        let center = NotifyCenter(
            configuration: NotifyCenter.Configuration(
                socketPath: TestServer.makeSocketPath(), clientName: "t", whileDisconnected: .wait(timeout: .infinity)))
        for (what, task) in [
            ("waitUntilConnected()", Task { try await center.waitUntilConnected() }),
            ("synchronize()", Task { try await center.synchronize() }),
        ] {
            task.cancel()
            switch try await Self.outcome(within: 10, of: task) {
            case nil: Issue.record("\(what) still waits 10 s after its task was cancelled")
            case .success: Issue.record("\(what) succeeded without a daemon")
            case .failure(let error): #expect(error is CancellationError, "\(what): \(error)")
            }
        }
        await center.close()
    }

    @Test("an infinite timeout waits: posts held while disconnected, no trap")
    func infiniteTimeouts() async throws {
        let path = TestServer.makeSocketPath()
        let center = NotifyCenter(
            configuration: NotifyCenter.Configuration(
                socketPath: path, clientName: "t", reconnect: .init(initialDelay: 0.05, maximumDelay: .infinity),
                whileDisconnected: .wait(timeout: .infinity)))
        try center.post("org.example.held")
        await center.close()
    }
}
