#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NotifyTestSupport
import Testing

@testable import NotifyServer

/// `NextTurnQueue` on a real event loop: work that keeps queueing itself lets the loop poll and serve other
/// descriptors' input in between (`EventLoop.execute` would run it all first: NIO drains its task queue before
/// it polls again).
@Suite("Work queued for the next turn", .timeLimit(.minutes(TestScale.minutes(1))))
struct NextTurnQueueTests {
    /// Records the input of a pipe's read end.
    private final class InputRecorder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let record: @Sendable (String) -> Void

        init(record: @escaping @Sendable (String) -> Void) {
            self.record = record
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            record("input")
        }
    }

    @Test("input that arrives while queued work runs is served before that work has run two more turns")
    func inputIsServedBetweenTurns() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            try await Self.checkInputIsServedBetweenTurns(on: group.next())
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    private static func checkInputIsServedBetweenTurns(on loop: EventLoop) async throws {
        let events = NIOLockedValueBox<[String]>([])
        var ends: [CInt] = [-1, -1]
        try #require(pipe(&ends) == 0)
        let writeEnd = ends[1]
        defer { close(writeEnd) }
        let input = try await NIOPipeBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        InputRecorder { event in events.withLockedValue { $0.append(event) } })
                }
            }
            .takingOwnershipOfDescriptor(input: ends[0]).get()
        defer { input.close(promise: nil) }

        let finished = loop.makePromise(of: Void.self)
        try await loop.submit {
            let queue = NextTurnQueue(eventLoop: loop)
            queue.open().assumeIsolated().whenComplete { opened in
                guard case .success = opened else {
                    finished.fail(TestFailure("the wake-up pipe did not open: \(opened)"))
                    return
                }
                var turn = 0
                func work() {
                    turn += 1
                    events.withLockedValue { $0.append("work \(turn)") }
                    // The first turn makes the other pipe readable; every turn but the last queues the next.
                    if turn == 1 {
                        var byte: UInt8 = 1
                        _ = write(writeEnd, &byte, 1)
                    }
                    if turn < 10 {
                        queue.enqueue(work)
                    } else {
                        queue.stop()
                        finished.succeed()
                    }
                }
                queue.enqueue(work)
            }
        }.get()
        try await finished.futureResult.get()

        let seen = events.withLockedValue { $0 }
        let inputAt = try #require(seen.firstIndex(of: "input"), "the input was never read: \(seen)")
        let thirdTurnAt = try #require(seen.firstIndex(of: "work 3"), "\(seen)")
        #expect(inputAt < thirdTurnAt, "the loop polled between turns: \(seen)")
        #expect(seen.filter { $0.hasPrefix("work") }.count == 10, "every turn ran once: \(seen)")
    }
}
