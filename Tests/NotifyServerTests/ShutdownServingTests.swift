import Logging
import NIOCore
import NIOEmbedded
import NotifyWire
import Testing

@testable import NotifyServer

/// A connection on an `EmbeddedEventLoop` that has sent `HELLO` and three turns' worth of `PING`s in one read: one
/// turn of them is served, the rest waits for a task the loop has not run.
private final class PingedConnection {
    let loop = EmbeddedEventLoop()
    let broker: Broker
    let connection: PeerChannelHandler
    let channel: EmbeddedChannel
    let pings = 3 * PeerChannelHandler.framesPerTurn
    private var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 20)

    init() throws {
        broker = Broker(
            eventLoop: loop, configuration: ServerConfiguration(listenAddress: .path("/nonexistent/shutdown-serving.sock")),
            instanceID: InstanceID(high: 1, low: 2), daemonPID: 1, logger: Logger(label: "shutdown-serving"))
        connection = PeerChannelHandler(broker: broker)
        channel = EmbeddedChannel(handler: connection, loop: loop)
        try channel.connect(to: SocketAddress(unixDomainSocketPath: "/nonexistent/peer")).wait()
        var bytes = ByteBuffer()
        ClientFrame.hello(ClientFrame.Hello(clientName: "embedded")).encode(into: &bytes)
        for index in 1...pings { ClientFrame.ping(requestID: UInt32(index)).encode(into: &bytes) }
        try channel.writeInbound(bytes)
    }

    /// The frames written to the client since the last call.
    func received() throws -> [ServerFrame] {
        while let chunk = try channel.readOutbound(as: ByteBuffer.self) { accumulator.append(chunk) }
        var frames: [ServerFrame] = []
        while let frame = try accumulator.next() { frames.append(frame) }
        return frames
    }
}

/// A graceful shutdown serves what the daemon has already received, on an `EmbeddedEventLoop` whose tasks run
/// only when the test says so: frames left for the next turn of the loop are there at shutdown for certain.
@Suite("Shutdown serves received frames")
struct ShutdownServingTests {
    @Test("a connection's frames deferred to the next turn are not served during a shutdown's last read (serving them could switch its reading off)")
    func deferredServingWaitsForTheLastRead() throws {
        let pinged = try PingedConnection()
        let (loop, broker, connection, pings) = (pinged.loop, pinged.broker, pinged.connection, pinged.pings)
        func pongs() throws -> Int { try pinged.received().filter { if case .pong = $0 { true } else { false } }.count }

        // One turn was served; the rest waits for the next turn, which comes while the last read is under way: it
        // must serve nothing (reaching the budget again would switch reading off, and the socket would not be read).
        connection.readOnceMore()
        loop.run()
        // (The HELLO was one of the first turn's frames.)
        let firstTurn = PeerChannelHandler.framesPerTurn - 1
        let afterLastRead = try pongs()
        #expect(afterLastRead == firstTurn, "\(afterLastRead) PINGs answered by the end of the last read")

        connection.serveReceivedFrames(atShutdown: true)
        _ = connection.beginShutdown()
        broker.flushDirtyPeers()
        loop.run()
        let atShutdown = try pongs()
        #expect(atShutdown == pings - firstTurn, "\(atShutdown) more PINGs answered at the shutdown")
        _ = try? pinged.channel.finish()
    }

    @Test("frames received but left for the next turn (over the per-turn budget) are answered before GOODBYE")
    func deferredFramesAreServedBeforeGoodbye() throws {
        let pinged = try PingedConnection()
        let (loop, broker, connection, pings) = (pinged.loop, pinged.broker, pinged.connection, pinged.pings)
        func received() throws -> [ServerFrame] { try pinged.received() }
        // One turn's worth was served; the rest waits for a task the loop has not run (nor has it written the
        // first turn's answers: a reply to a peer's own read goes out at the next tick).
        let peer = try #require(broker.peers.values.first)
        #expect(peer.mostFramesInOneTurn == PeerChannelHandler.framesPerTurn, "\(peer.mostFramesInOneTurn) frames served in one turn")

        connection.serveReceivedFrames(atShutdown: true)
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
        _ = try? pinged.channel.finish()
    }
}
