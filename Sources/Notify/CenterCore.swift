#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import Atomics
import NIOCore
import NIOPosix
import NotifyWire

/// The engine behind a ``NotifyCenter``: it coordinates one daemon connection on its own I/O thread.
///
/// The parts are values kept together under one lock (see ``State``): the ``ConnectionStateMachine`` decides
/// when to connect and what to replay, the ``ObservationRegistry`` routes names, ``PendingRequests`` waits for
/// answers, the ``OutboundBuffer`` batches frames and ``HeldPosts`` keeps posts made while disconnected. The
/// core takes the lock, asks the parts, and performs what they return (I/O, resuming callers, events) after
/// releasing it. Its extensions: connecting, inbound frames, delivery, requests, observations.
///
/// Public methods may be called from any thread; the lock is never held while user code runs or a
/// continuation resumes.
final class CenterCore: Sendable {
    typealias Connection = ConnectionStateMachine<DaemonConnection, CheckedContinuation<Void, Error>>

    let configuration: NotifyCenter.Configuration
    let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    let eventLoop: EventLoop
    let state: AdaptiveLockedValue<State>
    let allocator = ByteBufferAllocator()
    /// The registry's generation, read by the I/O thread without the lock (see ``NotificationRun``).
    let routingGeneration: ManagedAtomic<UInt64>
    let localSender = SenderCredentials(pid: UInt32(getpid()), uid: getuid(), gid: getgid())
    /// What the handlers have yet to handle, which pauses reading when it grows past the configured limit.
    let backlog: DeliveryBacklog

    init(configuration: NotifyCenter.Configuration) {
        self.configuration = configuration
        var logger = configuration.logger
        logger[metadataKey: "socket"] = "\(configuration.socketPath)"
        self.logger = logger
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.eventLoop = group.next()
        let generation = ManagedAtomic<UInt64>(0)
        self.routingGeneration = generation
        self.backlog = DeliveryBacklog(limit: max(0, configuration.pendingDeliveryLimit))
        self.state = AdaptiveLockedValue(
            State(connection: Connection(policy: configuration.reconnect), registry: ObservationRegistry(generation: generation)))
    }

    /// Everything behind the lock.
    struct State: Sendable {
        var connection: Connection
        var registry: ObservationRegistry
        var pending = PendingRequests()
        var outbound = OutboundBuffer()
        var held = HeldPosts()
        /// The name of the last successful `post`, which passed the grammar (compared byte for byte).
        var lastPostedName: ExactName?
        /// Ids of connect waiters and event streams.
        var nextWaiterID: UInt64 = 1
        var eventContinuations: [UInt64: AsyncStream<ConnectionEvent>.Continuation] = [:]
        /// Watches the socket path while there is no connection, to reconnect as soon as a daemon is back
        /// rather than when the backoff runs out; `nil` while connected (see ``SocketPathWatcher``).
        var socketWatcher: SocketPathWatcher?
        /// The next backoff attempt, cancelled when the socket appearing starts one sooner.
        var reconnectTask: Scheduled<Void>?

        init(connection: Connection, registry: ObservationRegistry) {
            self.connection = connection
            self.registry = registry
        }

        var channel: Channel? { connection.connection?.channel }
        var limits: ServerLimits { connection.postingLimits ?? .default }

        /// Why nothing more may be queued for the daemon: it has not read `limit` bytes already queued.
        func outgoingRefusal(limit: Int) -> NotifyError? {
            outbound.bytes.readableBytes >= limit ? .daemonNotReading(queuedBytes: outbound.bytes.readableBytes) : nil
        }

        /// The one way a request reaches the daemon: registers what waits for its answer under a fresh request
        /// id and appends the frame carrying that id. Returns `true` when the caller must schedule a flush.
        mutating func sendRequest(_ request: PendingRequests.Request, frame: (UInt32) -> ClientFrame) -> Bool {
            let id = pending.add(request)
            return outbound.append(frame(id))
        }

        mutating func makeWaiterID() -> UInt64 {
            defer { nextWaiterID += 1 }
            return nextWaiterID
        }
    }

    // MARK: Lifecycle

    func start() {
        eventLoop.execute { self.startConnecting() }
    }

    func close() async {
        let outcome = state.withLockedValue { state -> (Connection.Closed, [PendingRequests.Request], [AsyncStream<ConnectionEvent>.Continuation], SocketPathWatcher?)? in
            guard let closed = state.connection.close() else { return nil }
            let watcher = state.socketWatcher
            state.socketWatcher = nil
            let streams = Array(state.eventContinuations.values)
            state.eventContinuations.removeAll()
            return (closed, state.pending.removeAll(), streams, watcher)
        }
        if let (closed, pending, streams, watcher) = outcome {
            for waiter in closed.waiters { waiter.resume(throwing: NotifyError.closed) }
            for request in pending { request.complete(with: .failure(NotifyError.closed)) }
            for stream in streams { stream.finish() }
            if let channel = closed.connection?.channel { try? await channel.close() }
            if let watcher { try? await eventLoop.submit { watcher.stop() }.get() }
        }
        try? await group.shutdownGracefully()
    }

    /// Closes without waiting (from `deinit`).
    func closeInBackground() {
        let core = self
        Task { await core.close() }
    }

    // MARK: Events

    func connectionEvents() -> AsyncStream<ConnectionEvent> {
        let (stream, continuation) = AsyncStream<ConnectionEvent>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let id = state.withLockedValue { state -> UInt64? in
            if state.connection.isClosed { return nil }
            let id = state.makeWaiterID()
            state.eventContinuations[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLockedValue { $0.eventContinuations.removeValue(forKey: id) }
        }
        return stream
    }

    func reportDecodingFailure(_ failure: MessageDecodingError) {
        logger.error(
            "typed payload does not decode",
            metadata: ["name": "\(failure.name)", "type": "\(failure.typeName)", "reason": "\(failure.reason)",
                "senderPID": "\(failure.notification.sender.pid)"])
        emit(.messageDecodingFailed(failure))
    }

    func emit(_ event: ConnectionEvent) {
        let streams = state.withLockedValue { Array($0.eventContinuations.values) }
        for stream in streams { stream.yield(event) }
    }

    // MARK: Helpers

    func validate(_ name: String) throws(NotifyError) {
        try NotifyCenter.validate(name: name)
    }

    func notConnectedError(_ state: State) -> NotifyError {
        if state.connection.isClosed { return .closed }
        return .notConnected(path: configuration.socketPath)
    }

    static func describe(_ error: Error) -> String {
        if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
        return "\(error)"
    }
}

/// A channel to the daemon, as the ``ConnectionStateMachine`` tells connections apart: by identity.
struct DaemonConnection: Identifiable, Sendable {
    let channel: Channel
    var id: ObjectIdentifier { ObjectIdentifier(channel) }
}
