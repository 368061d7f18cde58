#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import NIOCore
import NotifyWire

/// Keeps the daemon serving when it runs out of file descriptors, on the listening channel.
///
/// When `accept` fails with `EMFILE` or `ENFILE`, the pending connection stays in the kernel's queue and the
/// socket stays readable: without care the loop would retry at once, forever, at full CPU, while the client
/// waits for a `WELCOME` that never comes. So, as nginx and libev do, the guard keeps one descriptor in reserve
/// (`/dev/null`): it gives it up to accept each pending connection, answers `ERROR unavailable` and closes
/// it, then takes the reserve back; and it stops accepting for a while (``AcceptPause``) before trying again. It reports
/// once per ``reportInterval`` how many connections it refused.
final class AcceptGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Channel
    typealias InboundOut = Channel

    /// At most one log message per this interval.
    static let reportInterval = TimeAmount.seconds(10)

    private let listeningDescriptor: CInt
    private var reserve: CInt
    private let broker: NIOLoopBound<Broker>
    private let logger: Logger
    private let pause = AcceptPause()
    private var lastReport: NIODeadline?
    private var refusedSinceReport: UInt64 = 0
    private var failuresSinceReport: UInt64 = 0
    /// The `ERROR unavailable` frame, encoded once.
    private let refusal: [UInt8]

    init(listeningDescriptor: CInt, broker: NIOLoopBound<Broker>, logger: Logger) {
        self.listeningDescriptor = listeningDescriptor
        self.broker = broker
        self.logger = logger
        self.reserve = Self.openReserve()
        var buffer = ByteBuffer()
        ServerFrame.error(
            ErrorFrame(
                requestID: ProtocolConstants.noRequest, code: .unavailable,
                message: "the daemon has no file descriptor left for another connection; try again later")
        ).encode(into: &buffer)
        refusal = Array(buffer.readableBytesView)
    }

    deinit {
        if reserve >= 0 { close(reserve) }
    }

    private static func openReserve() -> CInt {
        open("/dev/null", O_RDONLY | O_CLOEXEC)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        guard let failure = error as? IOError, failure.errnoCode == EMFILE || failure.errnoCode == ENFILE else {
            context.fireErrorCaught(error)
            return
        }
        let refused = refusePendingConnections()
        broker.value.statistics.acceptFailures += 1
        broker.value.statistics.connectionsRefused += refused
        failuresSinceReport += 1
        refusedSinceReport += refused
        report(errno: failure.errnoCode)
        pause.pause(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        pause.cancel()
    }

    /// Accepts every connection waiting in the kernel's queue on the reserve descriptor, tells it why and closes
    /// it. Returns how many.
    private func refusePendingConnections() -> UInt64 {
        guard reserve >= 0 || Self.retakeReserve(&reserve) else { return 0 }
        close(reserve)
        reserve = -1
        defer { _ = Self.retakeReserve(&reserve) }
        var refused: UInt64 = 0
        // Bounded, so one turn of the loop stays short however many clients wait; the rest wait for the next.
        while refused < 256 {
            // The listening socket is non-blocking: this ends with EAGAIN once the queue is empty.
            let connection = accept(listeningDescriptor, nil, nil)
            guard connection >= 0 else { break }
            refused += 1
            // A fresh socket's buffer takes these few bytes; the client reads them, then end of file.
            _ = refusal.withUnsafeBytes {
                send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
            }
            shutdown(connection, Int32(SHUT_WR))
            close(connection)
        }
        return refused
    }

    private static func retakeReserve(_ reserve: inout CInt) -> Bool {
        if reserve < 0 { reserve = openReserve() }
        return reserve >= 0
    }

    private func report(errno code: CInt) {
        let now = NIODeadline.now()
        if let lastReport, now - lastReport < Self.reportInterval { return }
        lastReport = now
        logger.error(
            "out of file descriptors: refusing new connections",
            metadata: [
                "errno": "\(code == EMFILE ? "EMFILE" : "ENFILE")",
                "refused": "\(refusedSinceReport)", "failed_accepts": "\(failuresSinceReport)",
                "connections": "\(broker.value.peers.count)",
            ])
        refusedSinceReport = 0
        failuresSinceReport = 0
    }
}

