import Logging
import NIOCore
import NIOEmbedded
import NotifyWire
import Testing

@testable import NotifyServer

/// A graceful shutdown serves what the daemon has already received, on an `EmbeddedEventLoop` whose tasks run
/// only when the test says so: frames left for the next turn of the loop are there at shutdown for certain.
@Suite("Shutdown serves received frames")
struct ShutdownServingTests {
    @Test("frames received but left for the next turn (over the per-turn budget) are answered before GOODBYE")
    func deferredFramesAreServedBeforeGoodbye() throws {
        let loop = EmbeddedEventLoop()
        let broker = Broker(
            eventLoop: loop, configuration: ServerConfiguration(listenAddress: .path("/nonexistent/shutdown-serving.sock")),
            instanceID: InstanceID(high: 1, low: 2), daemonPID: 1, logger: Logger(label: "shutdown-serving"))
        let connection = PeerChannelHandler(broker: broker)
        let channel = EmbeddedChannel(handler: connection, loop: loop)
        try channel.connect(to: SocketAddress(unixDomainSocketPath: "/nonexistent/peer")).wait()

        let pings = 3 * PeerChannelHandler.framesPerTurn
        var bytes = ByteBuffer()
        ClientFrame.hello(ClientFrame.Hello(clientName: "embedded")).encode(into: &bytes)
        for index in 1...pings { ClientFrame.ping(requestID: UInt32(index)).encode(into: &bytes) }
        try channel.writeInbound(bytes)

        var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 20)
        func received() throws -> [ServerFrame] {
            while let chunk = try channel.readOutbound(as: ByteBuffer.self) { accumulator.append(chunk) }
            var frames: [ServerFrame] = []
            while let frame = try accumulator.next() { frames.append(frame) }
            return frames
        }
        // One turn's worth was served; the rest waits for a task the loop has not run (nor has it written the
        // first turn's answers: a reply to a peer's own read goes out at the next tick).
        let peer = try #require(broker.peers.values.first)
        #expect(peer.mostFramesInOneTurn == PeerChannelHandler.framesPerTurn, "\(peer.mostFramesInOneTurn) frames served in one turn")

        connection.serveReceivedFrames()
        _ = connection.beginShutdown()
        broker.flushDirtyPeers()
        loop.run()
        let all = try received()
        let pongs = all.compactMap { frame -> UInt32? in
            if case .pong(let id) = frame { id } else { nil }
        }
        #expect(pongs.elementsEqual(1...UInt32(pings)), "\(pongs.count) of \(pings) PINGs received before the shutdown answered")
        guard case .goodbye = all.last else {
            Issue.record("GOODBYE is not the last frame: \(all.last.map { "\($0)" } ?? "nothing")")
            return
        }
        loop.run()
        _ = try? channel.finish()
    }
}
