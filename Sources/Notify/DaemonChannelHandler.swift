import NIOCore
import NotifyWire

/// Cuts the daemon's byte stream into frames and hands them to the ``CenterCore`` (on the I/O thread), and holds
/// reads back while the center's handlers are too far behind (``DeliveryBacklog``).
final class DaemonChannelHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer

    private let core: CenterCore
    /// The protocol minimum until `WELCOME` announces the daemon's limit, which also bounds its notifications.
    private var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: ProtocolConstants.minimumMaxFrameLength)
    private var failure: String?
    /// Notifications of the current read burst, handed to their observations' executors at the burst's end.
    private let staging = DeliveryStaging()
    /// A read held back by the backlog, made once it has drained.
    private var readHeld = false
    /// Whether this connection's `WELCOME` was read: before it, reads are never held back (the handshake, and
    /// whoever waits for the connection, must not wait for handlers of an earlier connection).
    private var welcomed = false

    init(core: CenterCore) {
        self.core = core
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        core.backlog.setResumer(owner: ObjectIdentifier(self)) {
            bound.eventLoop.execute { bound.value.handler.resumeReading(context: bound.value.context) }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // The resumer holds this handler, which holds the core: a cycle until the next connection's replaces it.
        core.backlog.removeResumer(owner: ObjectIdentifier(self))
    }

    func read(context: ChannelHandlerContext) {
        if welcomed, core.backlog.pauseIfFull() {
            readHeld = true
            return
        }
        context.read()
    }

    private func resumeReading(context: ChannelHandlerContext) {
        guard readHeld else { return }
        readHeld = false
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard failure == nil else { return }
        accumulator.append(unwrapInboundIn(data))
        do throws(WireDecodingError) {
            while true {
                // Most frames are notifications continuing a run on one name: routed from their bytes, where they
                // lie. Nothing this does writes to the channel (an `.immediate` handler's post goes through
                // `scheduleFlush`, at a later tick), so no failed write can read into the accumulator meanwhile.
                _ = accumulator.takeFramesInPlace { type, fields, _ in
                    type == MessageType.notification.rawValue && core.deliverContinuingRun(fields, staging: staging)
                }
                guard var raw = try accumulator.nextRawFrame() else { break }
                let frame = try ServerFrame.decode(type: raw.type, body: &raw.body)
                if case .welcome(let welcome) = frame {
                    accumulator.maxFrameLength = max(welcome.limits.maxFrameLength, ProtocolConstants.minimumMaxFrameLength)
                    welcomed = true
                }
                core.received(frame, on: context.channel, staging: staging)
                // The frame was a protocol error of another kind (a wrong kind of answer): errorCaught closed.
                if failure != nil { return }
            }
        } catch {
            // The frames before the malformed one were valid: they are delivered like any others.
            staging.flush()
            failure = "protocol error from the daemon: \(error)"
            core.logger.error("protocol error from the daemon, closing", metadata: ["error": "\(error)"])
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        staging.flush()
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        // What waited while the daemon did not read goes out now.
        if context.channel.isWritable { core.flushOutgoing() }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        // Before the disconnect is reported: observers get every notification that was read ahead of the
        // `disconnected` event and of the failures of pending requests.
        staging.flush()
        core.channelClosed(context.channel, reason: failure)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        staging.flush()
        failure = failure ?? CenterCore.describe(error)
        context.close(promise: nil)
    }
}
