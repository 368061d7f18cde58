import Foundation
import NIOCore
import NIOPosix
import NotifyTestSupport
import NotifyWire
import Testing

@testable import Notify

/// A daemon from before answers came in parts refuses the parts flag as an unknown query kind: the library asks
/// it again the old way (its answer fits one frame, or it says why).
@Suite("Queries against an older daemon")
struct OlderDaemonQueryTests {
    /// Speaks just enough of the protocol: WELCOME, and for QUERY what a daemon without parts answered.
    /// One connection only; `kinds` is read by the test under the lock.
    private final class OlderDaemon: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        private var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: 1 << 20)
        private let lock = NSLock()
        private var receivedKinds: [UInt8] = []
        var kinds: [UInt8] { lock.withLock { receivedKinds } }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            accumulator.append(unwrapInboundIn(data))
            var out = context.channel.allocator.buffer(capacity: 256)
            while let frame = try? accumulator.next() {
                switch frame {
                case .hello:
                    ServerFrame.welcome(
                        .init(daemonPID: 1, instanceID: InstanceID(high: 1, low: 1), limits: .default, serverName: "old"))
                        .encode(into: &out)
                case .query(let requestID, let kind, _):
                    lock.withLock { receivedKinds.append(kind) }
                    if kind > 3 {
                        ServerFrame.error(
                            ErrorFrame(requestID: requestID, code: .invalidRequest,
                                       message: "unknown query kind \(kind) (1 status, 2 names, 3 clients)"))
                            .encode(into: &out)
                    } else {
                        ServerFrame.queryResult(
                            requestID: requestID,
                            json: ByteBuffer(string: #"[{"has_retained":false,"name":"a.b","subscribers":1}]"#))
                            .encode(into: &out)
                    }
                case .ping(let requestID):
                    ServerFrame.pong(requestID: requestID).encode(into: &out)
                default:
                    break
                }
            }
            context.writeAndFlush(wrapOutboundOut(out), promise: nil)
        }
    }

    @Test("daemonNames() gets the answer from a daemon that does not know the parts flag")
    func namesFromAnOlderDaemon() async throws {
        let path = TestServer.makeSocketPath()
        let directory = String(path[..<path.lastIndex(of: "/")!])
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let handler = OlderDaemon()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let server = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(handler) }
            }
            .bind(unixDomainSocketPath: path).get()
        let center = try await NotifyCenter.connect(configuration: NotifyCenter.Configuration(socketPath: path, clientName: "t"))
        let names = try await center.daemonNames()
        #expect(names.map(\.name) == ["a.b"])
        #expect(handler.kinds == [QueryKind.names.rawValue | QueryKind.partsFlag, QueryKind.names.rawValue])
        await center.close()
        try await server.close()
        try await group.shutdownGracefully()
    }
}
