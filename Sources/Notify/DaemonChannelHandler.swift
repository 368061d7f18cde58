import NIOCore
import NotifyWire

/// Cuts the daemon's byte stream into frames and hands them to the ``CenterCore`` (on the I/O thread).
final class DaemonChannelHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let core: CenterCore
    /// The protocol minimum until `WELCOME` announces the daemon's limit, which also bounds its notifications.
    private var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: ProtocolConstants.minimumMaxFrameLength)
    private var failure: String?
    /// Notifications of the current read burst, handed to their observations' executors at the burst's end.
    private let staging = DeliveryStaging()

    init(core: CenterCore) {
        self.core = core
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
                }
                core.received(frame, on: context.channel, staging: staging)
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
