#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOCore
import NIOPosix

/// Runs work at the event loop's next turn: after the loop has polled for I/O and served what it found.
///
/// `EventLoop.execute` does not do this: NIO runs every queued task, those queued by tasks included, before it
/// polls again, so a connection that defers its leftover frames with `execute` is served to the end of its
/// backlog while every other connection's input waits in the kernel. Here the queue wakes the loop through a
/// pipe whose read end is a channel like the clients': its wake-up is one more readable descriptor among theirs,
/// and the waiting work runs after the loop has served every descriptor that poll found ready: each piece once
/// per poll, in the order it was queued. Lives on the event loop.
final class NextTurnQueue {
    private let eventLoop: EventLoop
    private var waiting: [() -> Void] = []
    private var running: [() -> Void] = []
    /// The pipe's write end, once its read end is registered with the loop (-1 until then, or without one).
    private var wakeDescriptor: CInt = -1
    private var channel: Channel?
    /// Whether a wake-up is on its way (a byte in the pipe, or a task when there is no pipe).
    private var isWaking = false
    private var isClosed = false

    /// A queue that runs its work as plain tasks until ``open()`` has registered its pipe (tests on an
    /// `EmbeddedEventLoop` never open one).
    init(eventLoop: EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Creates the wake-up pipe and registers its read end with the loop. Without it (no descriptor left, or
    /// the registration failed) work runs as tasks, as it would with `execute`.
    ///
    /// - Returns: a future that succeeds once the pipe wakes the loop, fails if it cannot.
    @discardableResult
    func open() -> EventLoopFuture<Void> {
        eventLoop.preconditionInEventLoop()
        var ends: [CInt] = [-1, -1]
        guard pipe(&ends) == 0 else { return eventLoop.makeFailedFuture(IOError(errnoCode: errno, reason: "pipe")) }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
        let queue = NIOLoopBound(self, eventLoop: eventLoop)
        return NIOPipeBootstrap(group: eventLoop)
            .channelOption(ChannelOptions.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 64))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(WakeHandler(queue: queue.value))
                }
            }
            .takingOwnershipOfDescriptor(input: readEnd)
            .assumeIsolated()
            .flatMapResult { channel -> Result<Void, any Error> in
                guard !self.isClosed else {
                    channel.close(promise: nil)
                    return .failure(ChannelError.ioOnClosedChannel)
                }
                self.channel = channel
                self.wakeDescriptor = writeEnd
                return .success(())
            }
            .always { result in
                // Without a registered read end, nothing would read a wake-up (NIO closes the read end itself
                // after a failed registration).
                if case .failure = result { close(writeEnd) }
            }
            .nonisolated()
    }

    /// Runs `work` at the loop's next turn, after the work queued before it.
    func enqueue(_ work: @escaping () -> Void) {
        waiting.append(work)
        guard !isWaking else { return }
        isWaking = true
        var byte: UInt8 = 1
        // A full pipe (EAGAIN) has a wake-up in it already.
        if wakeDescriptor >= 0, write(wakeDescriptor, &byte, 1) == 1 || errno == EAGAIN { return }
        eventLoop.assumeIsolated().execute { self.runWaiting() }
    }

    /// Runs what was queued before this turn; work queued meanwhile waits for the next one.
    private func runWaiting() {
        isWaking = false
        swap(&running, &waiting)
        for work in running { work() }
        running.removeAll(keepingCapacity: true)
    }

    /// Closes the pipe (when the server stops); work queued from now on runs as tasks.
    func stop() {
        eventLoop.preconditionInEventLoop()
        isClosed = true
        channel?.close(promise: nil)
        pipeClosed()
    }

    /// The pipe is gone (stopped, or its channel failed): a wake-up written to it would never be read.
    private func pipeClosed() {
        channel = nil
        if wakeDescriptor >= 0 { close(wakeDescriptor) }
        wakeDescriptor = -1
        if isWaking { eventLoop.assumeIsolated().execute { self.runWaiting() } }
    }

    /// Empties the pipe when it wakes the loop, then runs the queue.
    private final class WakeHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let queue: NextTurnQueue

        init(queue: NextTurnQueue) {
            self.queue = queue
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

        func channelReadComplete(context: ChannelHandlerContext) {
            // As a task: it runs after every other descriptor this poll found ready has been served, not
            // before those that come after the pipe in the poll's list.
            context.eventLoop.assumeIsolated().execute { [queue] in queue.runWaiting() }
        }

        func channelInactive(context: ChannelHandlerContext) {
            if queue.channel === context.channel { queue.pipeClosed() }
        }
    }
}
