import NIOCore
import NotifyWire

/// Cuts the daemon's byte stream into frames and hands them to the ``CenterCore`` (on the I/O thread).
final class DaemonChannelHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let core: CenterCore
    /// The protocol minimum until `WELCOME` announces the daemon's limit, which also bounds its notifications.
    private var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: ProtocolConstants.minimumMaxFrameLength)
    private var failure: String?

    init(core: CenterCore) {
        self.core = core
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard failure == nil else { return }
        accumulator.append(unwrapInboundIn(data))
        do throws(WireDecodingError) {
            while let frame = try accumulator.next() {
                if case .welcome(let welcome) = frame {
                    accumulator.maxFrameLength = max(welcome.limits.maxFrameLength, ProtocolConstants.minimumMaxFrameLength)
                }
                core.received(frame, on: context.channel)
            }
        } catch {
            failure = "protocol error from the daemon: \(error)"
            core.logger.error("protocol error from the daemon, closing", metadata: ["error": "\(error)"])
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        core.channelClosed(context.channel, reason: failure)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        failure = failure ?? CenterCore.describe(error)
        context.close(promise: nil)
    }
}
