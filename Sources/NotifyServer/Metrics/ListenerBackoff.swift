#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOCore

/// Keeps a listener that has no ``AcceptGuard`` (the metrics endpoints) from spinning when the daemon is out of
/// file descriptors.
///
/// NIO leaves a failed `accept`'s read pending, and the socket stays readable while a connection waits: without
/// this, every turn of the event loop would try again at once, at full CPU, for as long as the shortage lasts. The
/// waiting scraper is served once descriptors are free, or gives up; the clients' listener refuses its own
/// (``AcceptGuard``).
final class ListenerBackoff: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Channel
    typealias InboundOut = Channel

    private var resumeAccepting: Scheduled<Void>?

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        guard let failure = error as? IOError, failure.errnoCode == EMFILE || failure.errnoCode == ENFILE else {
            context.fireErrorCaught(error)
            return
        }
        guard resumeAccepting == nil else { return }
        context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        resumeAccepting = context.eventLoop.assumeIsolated().scheduleTask(in: AcceptGuard.backoff) { [self] in
            resumeAccepting = nil
            context.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
            context.read()
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        resumeAccepting?.cancel()
        resumeAccepting = nil
    }
}
