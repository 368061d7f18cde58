import Logging
import NIOCore
import NIOEmbedded
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// A ``Broker`` on an `EmbeddedEventLoop`, with peers on `EmbeddedChannel`s that run the real
/// ``PeerChannelHandler``: nothing happens until the test feeds bytes in or runs the loop, so every step of the
/// daemon's work is observable, without sockets or threads.
final class EmbeddedBroker {
    let loop = EmbeddedEventLoop()
    let broker: Broker

    init(label: String = "embedded", _ configure: (inout ServerConfiguration) -> Void = { _ in }) {
        var configuration = ServerConfiguration(listenAddress: .path("/nonexistent/\(label).sock"))
        configure(&configuration)
        broker = Broker(
            eventLoop: loop, configuration: configuration, instanceID: InstanceID(high: 1, low: 2), daemonPID: 1,
            logger: Logger(label: label, factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    /// A new connection (`channelActive` done, nothing sent yet).
    ///
    /// - Parameter stallWrites: the client does not read: what the daemon writes stays unwritten (its write
    ///   promises pending) until ``EmbeddedPeer/readWrites()``.
    /// - Parameter outbound: a handler between the channel and the daemon's handler (it sees the daemon's writes).
    func connect(_ name: String, stallWrites: Bool = false, outbound: (any ChannelOutboundHandler)? = nil) throws -> EmbeddedPeer {
        let handler = PeerChannelHandler(broker: broker)
        let stall = stallWrites ? WriteStall() : nil
        let channel = EmbeddedChannel(loop: loop)
        if let stall { try channel.pipeline.syncOperations.addHandler(stall) }
        if let outbound { try channel.pipeline.syncOperations.addHandler(outbound) }
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(unixDomainSocketPath: "/nonexistent/\(name)")).wait()
        loop.run()
        return EmbeddedPeer(name: name, channel: channel, handler: handler, stall: stall)
    }

    /// A new connection whose client does not read (``connect(_:stallWrites:)``), which has sent `HELLO` and then
    /// `frames` in one write, replies unread.
    func connectStalled(_ name: String, sending frames: [ClientFrame] = []) throws -> EmbeddedPeer {
        let peer = try connect(name, stallWrites: true)
        try peer.send([.hello(ClientFrame.Hello(clientName: name))] + frames)
        return peer
    }

    /// Runs every task the loop has due (frames deferred to the next turn, write completions).
    func run() { loop.run() }
}

/// One client connection of an ``EmbeddedBroker``: bytes in through `writeInbound`, the daemon's bytes out
/// through `readOutbound`, decoded as `ServerFrame`s.
final class EmbeddedPeer {
    let name: String
    let channel: EmbeddedChannel
    let handler: PeerChannelHandler
    private let stall: WriteStall?
    private var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 24)

    fileprivate init(name: String, channel: EmbeddedChannel, handler: PeerChannelHandler, stall: WriteStall?) {
        self.name = name
        self.channel = channel
        self.handler = handler
        self.stall = stall
    }

    /// Delivers the frames to the daemon in one read.
    func send(_ frames: ClientFrame...) throws {
        try send(frames)
    }

    func send(_ frames: [ClientFrame]) throws {
        var bytes = channel.allocator.buffer(capacity: 64 * frames.count)
        for frame in frames { frame.encode(into: &bytes) }
        try channel.writeInbound(bytes)
    }

    /// Delivers arbitrary bytes to the daemon in one read.
    func sendRaw(_ bytes: [UInt8]) throws {
        try channel.writeInbound(channel.allocator.buffer(bytes: bytes))
    }

    /// Every whole frame the daemon has written since the last call, in order (after running the loop's due
    /// tasks: a reply to a peer's own read is written at the next tick).
    func received() throws -> [ServerFrame] {
        channel.embeddedEventLoop.run()
        while let chunk = try channel.readOutbound(as: ByteBuffer.self) { accumulator.append(chunk) }
        var frames: [ServerFrame] = []
        while let frame = try accumulator.next() { frames.append(frame) }
        return frames
    }

    /// Sends `HELLO` and expects exactly `WELCOME` back.
    @discardableResult
    func hello() throws -> ServerFrame.Welcome {
        try send(.hello(ClientFrame.Hello(clientName: name)))
        let frames = try received()
        guard frames.count == 1, case .welcome(let welcome) = frames[0] else {
            throw TestFailure("peer '\(name)': expected WELCOME, got \(frames.map(\.summary))")
        }
        return welcome
    }

    /// Subscribes and expects exactly `OK` back.
    func subscribe(_ pattern: String, id: UInt32, policy: DeliveryPolicy = .coalesce) throws {
        try send(.testSubscribe(requestID: id, subscriptionID: id, name: pattern, policy: policy))
        let frames = try received()
        guard frames.count == 1, case .ok(id) = frames[0] else {
            throw TestFailure("peer '\(name)': expected OK(\(id)) for SUBSCRIBE '\(pattern)', got \(frames.map(\.summary))")
        }
    }

    /// Whether the daemon reads this connection: the last `autoRead` it set (on by default).
    var isReading: Bool {
        for (option, value) in channel.options.reversed() where option is ChannelOptions.Types.AutoReadOption {
            return value as! Bool
        }
        return true
    }

    var isActive: Bool { channel.isActive }

    /// Bytes the daemon wrote that the (stalled) client has not read.
    var unreadBytes: Int { stall?.heldBytes ?? 0 }

    /// The stalled client reads everything written so far, and from now on reads as it comes.
    func readWrites() {
        stall?.release()
    }

    /// The stalled client reads what it was sent, which must be: `WELCOME` and the `OK` of its subscription,
    /// then the first values (`value` extracts them; they count up from 1, in order, without a gap, fewer than
    /// `posted`), then the fatal `ERROR slow-consumer` naming `name`. Returns every frame it got.
    @discardableResult
    func expectClosedAsSlowConsumer(
        over name: String, posted: Int, value: (ServerFrame) -> UInt64?,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> [ServerFrame] {
        readWrites()
        let frames = try received()
        #expect(frames.prefix(2).map(\.summary).last == "OK(1)", "WELCOME and the OK first", sourceLocation: sourceLocation)
        let values = frames.compactMap(value)
        #expect(
            values == (0..<UInt64(values.count)).map { $0 + 1 },
            "what it got, in order and without a gap: \(frames.prefix(4).map(\.summary))", sourceLocation: sourceLocation)
        #expect(values.count < posted, sourceLocation: sourceLocation)
        guard case .error(let error) = frames.last else {
            Issue.record("expected ERROR slow-consumer last, got \(frames.suffix(2).map(\.summary))", sourceLocation: sourceLocation)
            return frames
        }
        #expect(error.code == .slowConsumer && error.closesConnection, sourceLocation: sourceLocation)
        #expect(error.message.contains("'\(name)'"), "\(error.message)", sourceLocation: sourceLocation)
        return frames
    }
}

/// Holds the writes of a channel, with their promises, as a socket whose peer does not read would.
private final class WriteStall: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var context: ChannelHandlerContext?
    private var held: [(ByteBuffer, EventLoopPromise<Void>?)] = []
    private var holding = true

    var heldBytes: Int { held.reduce(0) { $0 + $1.0.readableBytes } }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if holding {
            held.append((unwrapOutboundIn(data), promise))
        } else {
            context.write(data, promise: promise)
        }
    }

    func flush(context: ChannelHandlerContext) {
        if !holding { context.flush() }
    }

    func release() {
        guard holding, let context else { return }
        holding = false
        let writes = held
        held = []
        for (bytes, promise) in writes { context.write(wrapOutboundOut(bytes), promise: promise) }
        context.flush()
    }
}
