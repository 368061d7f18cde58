#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOCore

/// Stops a listening channel from accepting for a while after `accept` ran out of descriptors.
///
/// Off the epoll set, not just a held-back read: NIO leaves its read pending after a failed accept, and a
/// level-triggered socket with clients waiting would wake the loop again at once, forever, at full CPU. Used by
/// the clients' listener (``AcceptGuard``, which also refuses the waiting clients) and by the metrics listeners
/// (``ListenerBackoff``).
final class AcceptPause {
    /// How long accepting pauses.
    static let duration = TimeAmount.milliseconds(100)

    private var resumeAccepting: Scheduled<Void>?

    /// Whether `error` is running out of descriptors (`EMFILE`, `ENFILE`).
    static func isOutOfDescriptors(_ error: Error) -> Bool {
        guard let failure = error as? IOError else { return false }
        return failure.errnoCode == EMFILE || failure.errnoCode == ENFILE
    }

    /// Pauses accepting on `context`'s channel for ``duration`` (once: a pause under way is not extended).
    func pause(_ context: ChannelHandlerContext) {
        guard resumeAccepting == nil else { return }
        context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        resumeAccepting = context.eventLoop.assumeIsolated().scheduleTask(in: Self.duration) { [self] in
            resumeAccepting = nil
            context.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
            context.read()
        }
    }

    /// Drops a pause under way (the handler is going away).
    func cancel() {
        resumeAccepting?.cancel()
        resumeAccepting = nil
    }
}

/// Keeps a listener that has no ``AcceptGuard`` (the metrics endpoints) from spinning when the daemon is out of
/// file descriptors: a waiting scraper is served once descriptors are free, or gives up.
final class ListenerBackoff: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Channel
    typealias InboundOut = Channel

    private let pause = AcceptPause()

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        guard AcceptPause.isOutOfDescriptors(error) else {
            context.fireErrorCaught(error)
            return
        }
        pause.pause(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        pause.cancel()
    }
}
