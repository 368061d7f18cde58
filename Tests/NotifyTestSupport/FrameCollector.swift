import NIOCore
import NotifyWire

/// The collected frames of one connection. Lives on the connection's event loop.
final class Inbox {
    var frames = CircularBuffer<ReceivedFrame>()
    var end: ConnectionEnd?
    var waiter: (promise: EventLoopPromise<ClientEvent>, timeout: Scheduled<Void>)?
    /// Takes every frame, undecoded, instead of `frames` (``TestClient/consumeFrames(timeout:_:)``).
    var consumer: (handler: (UInt8, ByteBuffer) -> Bool, promise: EventLoopPromise<ConnectionEnd?>, timeout: Scheduled<Void>)?

    /// Hands a whole frame (length prefix included) to the consumer; false once it wants no more.
    func consume(_ bytes: ByteBuffer) -> Bool {
        guard let consumer, let type = bytes.getInteger(at: bytes.readerIndex + 4, as: UInt8.self),
            let body = bytes.getSlice(at: bytes.readerIndex + 5, length: bytes.readableBytes - 5)
        else { return true }
        if consumer.handler(type, body) { return true }
        self.consumer = nil
        consumer.timeout.cancel()
        consumer.promise.succeed(nil)
        return false
    }

    func deliver(_ received: ReceivedFrame) {
        if let waiter {
            self.waiter = nil
            waiter.timeout.cancel()
            waiter.promise.succeed(.frame(received))
        } else {
            frames.append(received)
        }
    }

    func finish(_ end: ConnectionEnd) {
        guard self.end == nil else { return }
        self.end = end
        if let consumer {
            self.consumer = nil
            consumer.timeout.cancel()
            consumer.promise.succeed(end)
        }
        if let waiter {
            self.waiter = nil
            waiter.timeout.cancel()
            waiter.promise.succeed(.end(end))
        }
    }
}

/// Cuts the byte stream into frames, keeping each frame's exact bytes, and decodes them with
/// `FrameAccumulator<ServerFrame>`.
final class FrameCollector: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    /// Generous: the daemon never sends frames longer than its `max_frame_length`.
    static let maxFrameLength: UInt32 = 1 << 24

    private let clientName: String
    private let inbox: NIOLoopBoundBox<Inbox>
    private var pending: ByteBuffer?
    private var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: FrameCollector.maxFrameLength)
    private var failed = false

    init(clientName: String, inbox: NIOLoopBoundBox<Inbox>) {
        self.clientName = clientName
        self.inbox = inbox
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        var bytes = unwrapInboundIn(data)
        if pending == nil {
            pending = bytes
        } else {
            pending!.writeBuffer(&bytes)
        }
        while let length = pending!.getInteger(at: pending!.readerIndex, endianness: .big, as: UInt32.self) {
            if length == 0 || length > Self.maxFrameLength {
                fail(context: context, "the daemon sent a frame length of \(length)")
                return
            }
            guard pending!.readableBytes >= 4 + Int(length) else { break }
            let raw = pending!.readSlice(length: 4 + Int(length))!
            if inbox.value.consumer != nil {
                // A flood: no decoding, the consumer reads the bytes.
                _ = inbox.value.consume(raw)
                continue
            }
            accumulator.append(raw)
            do throws(WireDecodingError) {
                guard let frame = try accumulator.next(), accumulator.bufferedBytes == 0 else {
                    fail(context: context, "frame accumulator did not return exactly one frame for \(raw.readableBytes) bytes")
                    return
                }
                inbox.value.deliver(ReceivedFrame(frame: frame, bytes: raw))
            } catch {
                fail(context: context, "the daemon sent an undecodable frame: \(error)")
                return
            }
        }
        if pending!.readableBytes == 0 { pending = nil } else { pending!.discardReadBytes() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let pending, pending.readableBytes > 0 {
            inbox.value.finish(.failure("connection ended inside a frame (\(pending.readableBytes) bytes of it received)"))
        } else {
            inbox.value.finish(.endOfFile)
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        inbox.value.finish(.failure("connection error: \(error)"))
        context.close(promise: nil)
    }

    private func fail(context: ChannelHandlerContext, _ reason: String) {
        failed = true
        inbox.value.finish(.failure("client '\(clientName)': \(reason)"))
        context.close(promise: nil)
    }
}
