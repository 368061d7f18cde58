#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NotifyWire
import ServiceLifecycle

/// The notification daemon: accepts client connections on a Unix socket and routes posts to subscribers.
///
/// Run it inside a `ServiceGroup` (it stops on graceful shutdown) or call ``run()`` directly. All routing
/// state lives on one event loop.
package final class NotifyServer: Service, Sendable {
    /// The version of notifyd, reported in `WELCOME`.
    package static let version = "0.1.0"

    /// The configuration the server was created with.
    package let configuration: ServerConfiguration
    /// This run's instance id, announced in `WELCOME`.
    package let instanceID: InstanceID
    let logger: Logger
    /// The single-thread event loop group (internal for tests and the metrics endpoints).
    let group: MultiThreadedEventLoopGroup

    /// The event loop that runs all routing. Work scheduled on it (such as the systemd watchdog ping) stops
    /// running when the loop is stuck, which is the point of scheduling it there.
    package var eventLoop: EventLoop { group.next() }
    private let onListening: @Sendable (String) -> Void
    let listener = NIOLockedValueBox(ListenerState())

    struct ListenerState {
        var channel: Channel?
        var shutdownRequested = false
        /// The listening descriptor (for a `--replace` hand-over, which passes a duplicate of it on).
        var descriptor: CInt?
        /// A successor asked for everything (`--replace`): the connection to answer on, and a duplicate of the
        /// listening descriptor made before the channel closed its own.
        var replace: (connection: CInt, listener: CInt)?
    }
    /// What the predecessor handed over, if this daemon took over from one.
    private let incoming: IncomingHandover?
    /// Where the state goes when the daemon stops for a restart (systemd's store), if anywhere.
    let stopHandover: (any HandoverSink)?
    /// The broker while the server runs (internal for tests, which run code on its event loop).
    let broker = NIOLockedValueBox<NIOLoopBound<Broker>?>(nil)

    /// Creates a server; nothing happens until ``run()``.
    ///
    /// - Parameters:
    ///   - configuration: where to listen and what limits to enforce.
    ///   - logger: the logger for connection and protocol events.
    ///   - onListening: called once the socket accepts connections (e.g. to tell systemd `READY=1`).
    ///   - handover: the state and sockets taken over from a predecessor (`--replace`, systemd's store).
    ///   - stopHandover: where to hand everything when stopping for a restart (systemd's store); asked at stop.
    package init(
        configuration: ServerConfiguration, logger: Logger, handover: IncomingHandover? = nil,
        stopHandover: (any HandoverSink)? = nil, onListening: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.configuration = configuration
        self.incoming = handover
        self.stopHandover = stopHandover
        self.instanceID = (try? handover?.snapshot.get())?.instanceID ?? InstanceID.random()
        self.logger = logger
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.onListening = onListening
    }

    /// Listens and serves until graceful shutdown (or task cancellation), then closes every connection after
    /// writing what is queued for it (within the configured deadline) and removes the socket file it created.
    package func run() async throws {
        do {
            try await serve()
        } catch {
            // A failed start must not leave the event loop thread behind.
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    private func serve() async throws {
        let problems = configuration.limits.inconsistencies
        guard problems.isEmpty else {
            throw ServerError.invalidConfiguration(problems.joined(separator: "; "))
        }
        let eventLoop = group.next()
        // NSS and /proc lookups for new connections (they may block) run here, never on the event loop.
        let identityPool = NIOThreadPool(numberOfThreads: 2)
        identityPool.start()
        defer { identityPool.shutdownGracefully { _ in } }
        // The memory samples read /proc on a thread of their own: never queued behind a hung NSS lookup.
        let samplingPool = NIOThreadPool(numberOfThreads: 1)
        samplingPool.start()
        defer { samplingPool.shutdownGracefully { _ in } }
        let broker = try await eventLoop.submit { [configuration, instanceID, logger] in
            let broker = Broker(
                eventLoop: eventLoop, configuration: configuration, instanceID: instanceID,
                daemonPID: UInt32(getpid()), logger: logger, identityPool: identityPool)
            broker.nextTurn.open().whenFailure { error in
                logger.warning(
                    "no wake-up pipe: a connection past its turn's budget is served on before others are polled",
                    metadata: ["error": "\(error)"])
            }
            return NIOLoopBound(broker, eventLoop: eventLoop)
        }.get()
        defer { eventLoop.execute { broker.value.nextTurn.stop() } }

        self.broker.withLockedValue { $0 = broker }
        let periodic = try await eventLoop.submit {
            [
                eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .seconds(1)) { _ in
                    let trim = broker.value.sampleRates()
                    // /proc is read on the pool; the loop only stores the answer. Freed memory is handed back to
                    // the system there too, once per quiet spell (the allocator keeps it otherwise).
                    samplingPool.runIfActive(eventLoop: eventLoop) {
                        if trim { releaseFreedMemory() }
                        return Broker.residentMemory()
                    }
                    .whenSuccess { broker.value.samples.residentMemoryBytes = $0 }
                },
                eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(50), delay: .milliseconds(50)) { _ in
                    broker.value.releaseHeldPeers()
                    broker.value.identities.commands.readPending()
                },
            ]
        }.get()
        defer { for task in periodic { task.cancel() } }
        defer { self.broker.withLockedValue { $0 = nil } }
        if let incoming { await adopt(incoming, broker: broker, on: eventLoop) }
        let (channel, descriptor, boundPath) = try await bind(broker: broker)
        let createdPath = boundPath ?? (incoming?.ownsSocketFile == true ? configuration.listenAddress.path : nil)
        // The file this daemon serves, removed at the end only if it is still that one.
        let createdFile = createdPath.flatMap(SocketFile.identity(at:))
        let replaceListener = startReplaceListener(socketPath: createdPath)
        let metricsChannels = try await startMetricsEndpoints(broker: broker)
        let metricsFile: (path: String, identity: SocketFile.Identity?)? =
            if case .path(let path) = configuration.metricsAddress { (path, SocketFile.identity(at: path)) } else { nil }
        // After a hand-over the successor has bound its own metrics socket at the same path: it stays.
        var handedOver = false
        defer {
            for metrics in metricsChannels { metrics.close(promise: nil) }
            if !handedOver, let metricsFile { SocketFile.remove(metricsFile.path, ifStill: metricsFile.identity) }
        }
        // Store the listener before anyone hears that it listens, so a shutdown() from then on reaches it; a
        // shutdown() that came earlier is remembered and honoured here.
        let stopRequested = listener.withLockedValue { listener -> Bool in
            listener.channel = channel
            listener.descriptor = descriptor
            return listener.shutdownRequested
        }
        if stopRequested { channel.close(promise: nil) }
        logger.info(
            "notifyd listening",
            metadata: [
                "socket": "\(configuration.listenAddress)", "instance": "\(instanceID)", "pid": "\(getpid())",
            ])
        onListening(configuration.listenAddress.description)

        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                try? await channel.closeFuture.get()
            } onGracefulShutdown: {
                channel.close(promise: nil)
            }
        } onCancel: {
            channel.close(promise: nil)
        }
        let replace = listener.withLockedValue { listener in
            defer {
                listener.channel = nil
                listener.descriptor = nil
            }
            return listener.replace
        }
        let replaceConnection = replace?.connection
        let listenerCopy = replace?.listener
        try? await channel.close().get()

        if let sink = await handoverSink(replaceConnection: replaceConnection) {
            var handover = await capture(broker: broker, on: eventLoop)
            handover.listener = listenerCopy
            handover.ownsSocketFile = createdPath != nil
            do {
                try await sink.deliver(handover)
                handedOver = true
                handover.closeAll()
                replaceListener?.stop(keepFile: true)
                logger.notice("handed over", metadata: ["connections": "\(handover.clientSockets.count)"])
                return
            } catch {
                // The channels are closed already: the clients see the end of their connections and reconnect.
                logger.error("hand-over failed; connections are closed", metadata: ["error": "\(error)"])
                handover.closeAll()
                replaceListener?.stop()
                if let createdPath { SocketFile.remove(createdPath, ifStill: createdFile) }
                return
            }
        }
        if let listenerCopy, listenerCopy >= 0 { close(listenerCopy) }
        replaceListener?.stop()
        await closeClients(broker: broker, on: eventLoop)
        if let createdPath { SocketFile.remove(createdPath, ifStill: createdFile) }
        logger.info("notifyd stopped")
    }

    /// Starts a graceful shutdown, as SIGTERM does under a `ServiceGroup`: stop accepting, write what is queued,
    /// close every connection, and return from ``run()``.
    package func shutdown() {
        let channel = listener.withLockedValue { listener -> Channel? in
            listener.shutdownRequested = true
            return listener.channel
        }
        channel?.close(promise: nil)
    }

    /// Replaces the reserved prefixes and quotas while running (for a configuration reload). Connections and
    /// subscriptions stay; new requests are judged by the new rules.
    package func updateAccess(_ access: AccessConfiguration) async {
        guard let broker = broker.withLockedValue({ $0 }) else { return }
        try? await broker.eventLoop.submit { broker.value.updateAccess(access) }.get()
    }

    /// Records that a configuration reload is over: `error` says why it failed, `nil` that it applied (call
    /// ``updateAccess(_:)`` first). The `status` answer counts reloads, so a client that signalled one can
    /// wait for it.
    package func noteReload(error: String?) async {
        guard let broker = broker.withLockedValue({ $0 }) else { return }
        try? await broker.eventLoop.submit { broker.value.noteReload(error: error) }.get()
    }

    /// The answer to a `status` query, or `nil` when the server is not running.
    package func status() async -> DaemonStatus? {
        guard let broker = broker.withLockedValue({ $0 }) else { return nil }
        return try? await broker.eventLoop.submit { broker.value.status() }.get()
    }

    /// A snapshot of connections and counters, or `nil` when the server is not running.
    package func snapshot() async -> ServerSnapshot? {
        guard let broker = broker.withLockedValue({ $0 }) else { return nil }
        return try? await broker.eventLoop.submit { broker.value.snapshot() }.get()
    }

    /// The handlers of the open connections, oldest first: what a stop or a hand-over goes through.
    static func connectionHandlers(of broker: Broker) -> [PeerChannelHandler] {
        broker.peers.values.sorted { $0.number < $1.number }.compactMap { $0.handler }
    }

    /// How a client connection's reads are sized, whether it was accepted here or handed over.
    static let peerReceiveAllocator = AdaptiveRecvByteBufferAllocator(minimum: 1024, initial: 2048, maximum: 1 << 20)

    /// Connections the kernel queues before the daemon accepts them (systemd's default `Backlog=`, SOMAXCONN).
    static let listenBacklog: CInt = 4096

    private func bind(broker: NIOLoopBound<Broker>) async throws -> (Channel, CInt, String?) {
        // The listening descriptor is ours in both cases (bound here, or passed by systemd), so the accept
        // guard can accept on it itself when NIO cannot for want of descriptors.
        let (descriptor, createdPath) = try listeningDescriptor()
        let logger = logger
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: Self.listenBacklog)
            .serverChannelInitializer { channel in
                // NIO's channel for a bound socket listens again with its own default backlog (128), which
                // replaces ours (or systemd's Backlog=): set it once more (the kernel caps it at somaxconn).
                _ = listen(descriptor, Self.listenBacklog)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        AcceptGuard(listeningDescriptor: descriptor, broker: broker, logger: logger))
                }
            }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // Set here rather than as child options, which NIO applies one future at a time per connection.
                    guard let options = channel.syncOptions else { throw ChannelError.operationUnsupported }
                    try options.setOption(ChannelOptions.allowRemoteHalfClosure, value: true)
                    try options.setOption(ChannelOptions.recvAllocator, value: Self.peerReceiveAllocator)
                    try channel.pipeline.syncOperations.addHandler(PeerChannelHandler(broker: broker.value))
                }
            }
        do {
            return (try await bootstrap.withBoundSocket(descriptor).get(), descriptor, createdPath)
        } catch {
            if let createdPath { unlink(createdPath) }
            throw error
        }
    }

    /// The bound socket to listen on: the inherited one, or a new one bound at the configured path (returned
    /// too, for removal at the end).
    private func listeningDescriptor() throws -> (CInt, String?) {
        switch configuration.listenAddress {
        case .inheritedDescriptor(let descriptor, _):
            return (descriptor, nil)
        case .path(let path):
            try SocketFile.prepare(path: path)
            // Bound in a private directory, given its mode, then moved into place: see
            // `SocketFile.makeStagingDirectory(for:)`.
            let staging = try SocketFile.makeStagingDirectory(for: path)
            defer { if let staging { rmdir(staging) } }
            let bindPath = staging.map { $0 + "/s" } ?? path
            let descriptor = try SocketFile.bindSocket(path: bindPath, reportedAs: path, backlog: Self.listenBacklog)
            /// Gives up on the bound socket after a failed `what`, whose `errno` is still current.
            func abandon(_ what: String) -> ServerError {
                let reason = "\(what): \(String(cString: strerror(errno)))"
                close(descriptor)
                unlink(bindPath)
                return ServerError.socketSetupFailed(path: path, reason: reason)
            }
            if chmod(bindPath, mode_t(configuration.socketMode)) != 0 { throw abandon("chmod failed") }
            if bindPath != path, rename(bindPath, path) != 0 { throw abandon("cannot move the socket into place") }
            return (descriptor, path)
        }
    }

    private func closeClients(broker: NIOLoopBound<Broker>, on eventLoop: EventLoop) async {
        let deadline = TimeAmount.nanoseconds(Int64(configuration.shutdownDeadlineSeconds * 1e9))
        let closed: EventLoopFuture<Void> = eventLoop.flatSubmit {
            // Every connection is read once more at the next poll (what its client wrote before the stop), then
            // everything received is served, then each gets its GOODBYE.
            for handler in Self.connectionHandlers(of: broker.value) { handler.readOnceMore() }
            let lastReadDone = eventLoop.makePromise(of: Void.self)
            broker.value.nextTurn.enqueue { lastReadDone.succeed() }
            return lastReadDone.futureResult.assumeIsolated().flatMap {
                let handlers = Self.connectionHandlers(of: broker.value)
                for handler in handlers { handler.serveReceivedFrames(atShutdown: true) }
                let futures = handlers.map { $0.beginShutdown() }
                broker.value.flushDirtyPeers()
                return EventLoopFuture.andAllComplete(futures, on: eventLoop)
            }.nonisolated()
        }
        let timeout = eventLoop.scheduleTask(in: deadline) {
            for peer in broker.value.peers.values { peer.forceClose() }
        }
        try? await closed.get()
        timeout.cancel()
    }
}

/// Errors that stop the server from starting.
package enum ServerError: Error, CustomStringConvertible {
    /// Another daemon already accepts connections on this socket path.
    case alreadyRunning(path: String)
    /// The socket's directory or file could not be prepared.
    case socketSetupFailed(path: String, reason: String)
    /// The configuration contradicts itself or the protocol.
    case invalidConfiguration(String)

    /// How this reads in logs and error messages.
    package var description: String {
        switch self {
        case .alreadyRunning(let path):
            "another notifyd is already listening at \(path); stop it or choose another --socket"
        case .socketSetupFailed(let path, let reason):
            "cannot set up the socket at \(path): \(reason)"
        case .invalidConfiguration(let problems):
            "invalid configuration: \(problems)"
        }
    }
}

#if canImport(Glibc)
/// glibc's `malloc_trim(3)` (declared in `<malloc.h>`, which the Glibc module does not bring in).
@_silgen_name("malloc_trim")
private func malloc_trim(_ pad: Int) -> Int32

/// glibc's `mallopt(3)` (`<malloc.h>` too).
@_silgen_name("mallopt")
private func mallopt(_ parameter: Int32, _ value: Int32) -> Int32
#endif

extension NotifyServer {
    /// Fixes glibc's mmap and trim thresholds at 2 MiB for the whole process, unless the environment sets them.
    /// Left dynamic, they rise once a large buffer is freed, and neither `free` nor `malloc_trim` then hands back
    /// a thread arena's free top below the trim threshold: the event loop's arena kept megabytes of free pages
    /// (BENCHMARKS.md, F24). 2 MiB keeps batches and receive buffers (up to 1 MiB) out of `mmap`.
    package static func fixAllocatorThresholds(environment: [String: String]) {
        #if canImport(Glibc)
        let ownSettings = ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"]
        guard !ownSettings.contains(where: { environment[$0] != nil }) else { return }
        _ = mallopt(-3, 2 << 20)  // M_MMAP_THRESHOLD
        _ = mallopt(-1, 2 << 20)  // M_TRIM_THRESHOLD
        #endif
    }
}

/// Hands the allocator's free pages back to the system (glibc keeps them otherwise, so a daemon's resident memory
/// would stay at its high-water mark after the clients that needed it left).
private func releaseFreedMemory() {
    #if canImport(Glibc)
    _ = malloc_trim(0)
    #endif
}
