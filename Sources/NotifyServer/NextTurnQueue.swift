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
/// pipe whose read end is a channel like the clients': its wake-up is one more readable descriptor among theirs.
/// The poll that finds it takes the work queued so far as one batch, which runs after every descriptor of that
/// poll has been served; work queued after that (by those descriptors, or by the batch) waits for the next poll.
/// Lives on the event loop.
final class NextTurnQueue {
    private let eventLoop: EventLoop
    /// Work queued since the last poll that found the pipe readable.
    private var waiting: [() -> Void] = []
    /// The batch that poll took, to run once the loop has served the rest of that poll.
    private var ready: [() -> Void] = []
    /// The pipe's write end, once its read end is registered with the loop (-1 until then, or without one).
    private var wakeDescriptor: CInt = -1
    private var channel: Channel?
    /// Whether a wake-up is on its way for ``waiting`` (a byte in the pipe, or a task when there is no pipe).
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
        guard let bootstrap = NIOPipeBootstrap(validatingGroup: eventLoop), pipe(&ends) == 0 else {
            return eventLoop.makeFailedFuture(IOError(errnoCode: errno, reason: "cannot open the next-turn pipe"))
        }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
        let queue = NIOLoopBound(self, eventLoop: eventLoop)
        // NIO closes the read end itself once the channel exists (a failure in the initializer or the
        // registration), and hands it back when it could not make one: nothing that can fail comes before the
        // initializer, so whether it ran tells who closes the read end.
        let initialized = NIOLoopBoundBox(false, eventLoop: eventLoop)
        return bootstrap
            .channelInitializer { channel in
                initialized.value = true
                return channel.eventLoop.makeCompletedFuture {
                    try channel.syncOptions?.setOption(
                        ChannelOptions.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 64))
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
                guard case .failure = result else { return }
                close(writeEnd)
                if !initialized.value { close(readEnd) }
            }
            .nonisolated()
    }

    /// Runs `work` at the loop's next turn, after the work queued before it.
    func enqueue(_ work: @escaping () -> Void) {
        eventLoop.assertInEventLoop()
        waiting.append(work)
        guard !isWaking else { return }
        isWaking = true
        var byte: UInt8 = 1
        // A full pipe (EAGAIN) has a wake-up in it already.
        if wakeDescriptor >= 0, write(wakeDescriptor, &byte, 1) == 1 || errno == EAGAIN { return }
        eventLoop.assumeIsolated().execute { self.wokenWithoutPipe() }
    }

    /// A poll found the pipe readable: what waits now is the batch for this turn, run once the loop has served
    /// the other descriptors of the poll.
    private func polled() {
        isWaking = false
        ready += waiting
        waiting.removeAll(keepingCapacity: true)
        eventLoop.assumeIsolated().execute { self.runReady() }
    }

    /// Without a pipe: the task is the turn.
    private func wokenWithoutPipe() {
        guard isWaking else { return }  // a poll of the pipe took the batch meanwhile
        polled()
    }

    private func runReady() {
        var batch: [() -> Void] = []
        swap(&batch, &ready)
        for work in batch { work() }
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
        if isWaking { eventLoop.assumeIsolated().execute { self.wokenWithoutPipe() } }
    }

    /// Empties the pipe when it wakes the loop, then takes the batch.
    private final class WakeHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let queue: NextTurnQueue

        init(queue: NextTurnQueue) {
            self.queue = queue
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

        func channelReadComplete(context: ChannelHandlerContext) {
            queue.polled()
        }

        func channelInactive(context: ChannelHandlerContext) {
            if queue.channel === context.channel { queue.pipeClosed() }
        }
    }
}
