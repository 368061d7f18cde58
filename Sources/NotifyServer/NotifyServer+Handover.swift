#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import NIOCore
import NIOPosix
import NotifyWire

/// The hand-over: what a stopping daemon captures for its successor, and how a successor adopts it
/// (ARCHITECTURE.md, "A hand-over").
extension NotifyServer {
    /// Where this stop's state goes: to the successor that asked (`--replace`), or to systemd's store when the
    /// service manager restarts the daemon; `nil`: every client gets its `GOODBYE`.
    func handoverSink(replaceConnection: CInt?) async -> (any HandoverSink)? {
        if let replaceConnection { return ReplaceSink(connection: replaceConnection) }
        guard let stopHandover else { return nil }
        let connections = await snapshot()?.clients.count ?? 0
        return await stopHandover.shouldHandOver(connections: connections) ? stopHandover : nil
    }

    /// Takes the daemon's state in one turn of the event loop: every frame already read is served and what can
    /// be written is written, then each connection's record and a duplicate of its socket are taken and its
    /// channel is closed, so nothing more is read or written here.
    func capture(broker: NIOLoopBound<Broker>, on eventLoop: EventLoop) async -> OutgoingHandover {
        let limit = CInt(truncatingIfNeeded: sysconf(Int32(_SC_OPEN_MAX)))
        let result = try? await eventLoop.submit { [logger] () -> OutgoingHandover in
            let handlers = Self.connectionHandlers(of: broker.value)
            for handler in handlers { handler.serveReceivedFrames(atShutdown: false) }
            broker.value.flushDirtyPeers()
            let descriptors = SocketCookie.descriptorsByCookie(limit: limit)
            var records: [HandoverSnapshot.PeerRecord] = []
            var handedOver: [(PeerChannelHandler, CInt)] = []
            var notHandedOver: [PeerChannelHandler] = []
            for handler in handlers {
                // The socket first: a connection's record, once taken, leaves its subscriptions to the successor.
                guard let descriptor = descriptors[handler.cookie] else {
                    logger.warning(
                        "no socket found for a connection; it is closed", metadata: ["cookie": "\(handler.cookie)"])
                    notHandedOver.append(handler)
                    continue
                }
                guard let record = handler.handoverRecord() else {
                    notHandedOver.append(handler)
                    continue
                }
                records.append(record)
                handedOver.append((handler, descriptor))
            }
            let snapshot = broker.value.handoverSnapshot(peers: records).encoded()
            // Each socket is duplicated just before its channel closes the original, so the daemon never holds
            // more than one descriptor beyond what it held: with every connection duplicated first, a daemon
            // past half its descriptor limit lost the connections whose duplicate failed.
            var sockets: [CInt] = []
            for (handler, descriptor) in handedOver {
                let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 3)
                handler.closeForHandover()
                if copy >= 0 {
                    sockets.append(copy)
                } else {
                    logger.warning(
                        "a connection's socket cannot be duplicated; it is closed",
                        metadata: ["error": "\(String(cString: strerror(errno)))"])
                }
            }
            for handler in notHandedOver { handler.closeForHandover() }
            return OutgoingHandover(snapshot: snapshot, clientSockets: sockets, listener: nil, ownsSocketFile: false)
        }.get()
        return result ?? OutgoingHandover(snapshot: [], clientSockets: [], listener: nil, ownsSocketFile: false)
    }

    /// Serves the connections a predecessor handed over, each as it was (or, without its record, with a
    /// `GOODBYE`), and takes over its sequence numbers, state values and retained notifications.
    func adopt(_ incoming: IncomingHandover, broker: NIOLoopBound<Broker>, on eventLoop: EventLoop) async {
        var records: [UInt64: HandoverSnapshot.PeerRecord] = [:]
        switch incoming.snapshot {
        case .success(let snapshot):
            try? await eventLoop.submit { broker.value.restoreHandover(snapshot) }.get()
            for record in snapshot.peers { records[record.cookie] = record }
        case .failure(let error):
            logger.error(
                "the predecessor's snapshot cannot be read: its clients are sent GOODBYE",
                metadata: ["error": "\(error)", "connections": "\(incoming.clientSockets.count)"])
        }
        var adopted = 0
        var sockets: [(descriptor: CInt, cookie: UInt64?, origin: PeerChannelHandler.Origin)] = []
        for descriptor in incoming.clientSockets {
            let cookie = SocketCookie.read(descriptor: descriptor)
            let record = cookie.flatMap { records.removeValue(forKey: $0) }
            if record != nil { adopted += 1 }
            sockets.append((descriptor, cookie, record.map { .handedOver($0) } ?? .handedOverWithoutRecord))
        }
        // Registered from the loop itself, one after another, so no registration waits for a wake-up of the loop.
        let group = self.group
        let logger = self.logger
        let channels = (try? await eventLoop.flatSubmit { [sockets] () -> EventLoopFuture<[Channel]> in
            let registrations = sockets.map { socket in
                ClientBootstrap(group: group)
                    .channelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
                    .channelOption(ChannelOptions.recvAllocator, value: Self.peerReceiveAllocator)
                    .channelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(
                                PeerChannelHandler(broker: broker.value, origin: socket.origin))
                        }
                    }
                    .withConnectedSocket(socket.descriptor)
            }
            return EventLoopFuture.whenAllComplete(registrations, on: eventLoop).map { results in
                zip(results, sockets).compactMap { result, socket in
                    switch result {
                    case .success(let channel): return channel
                    case .failure(let error):
                        logger.warning("a handed-over socket cannot be served", metadata: ["error": "\(error)"])
                        // NIO closed it if it made a channel of it. Closed only if the descriptor is still that
                        // socket: a second close could hit a descriptor another thread has opened since.
                        if let cookie = socket.cookie, SocketCookie.read(descriptor: socket.descriptor) == cookie {
                            close(socket.descriptor)
                        }
                        return nil
                    }
                }
            }
        }.get()) ?? []
        // Only now does any of them read: a post served earlier would miss the subscriptions of the connections
        // restored after its poster's.
        try? await eventLoop.submit { [channels] in
            for channel in channels {
                try? channel.pipeline.syncOperations.handler(type: PeerChannelHandler.self).startServingHandedOver()
            }
        }.get()
        for record in records.values {
            logger.info("a client left during the hand-over", metadata: ["connection": "\(record.number)"])
        }
        logger.notice("took over from the previous daemon", metadata: ["connections": "\(adopted)"])
    }

    /// Listens for `notifyd --replace` next to the socket this daemon created (a socket-activated daemon is
    /// replaced by restarting its unit instead).
    func startReplaceListener(socketPath: String?) -> ReplaceListener? {
        guard let socketPath else { return nil }
        do throws(ReplaceChannel.Failure) {
            let replaceListener = try ReplaceListener(socketPath: socketPath, logger: logger)
            replaceListener.start { [self] connection -> String? in
                let outcome = listener.withLockedValue { listener -> Result<Channel?, ReplaceChannel.Failure> in
                    // Not listening yet (still starting): nothing to hand over, and nothing stopped; ask again.
                    guard let descriptor = listener.descriptor else {
                        return .failure(ReplaceChannel.Failure("the running daemon is still starting; try again"))
                    }
                    // Stopping already: its descriptor number may have been reused (even by this request's socket).
                    guard listener.channel?.isActive == true else {
                        return .failure(ReplaceChannel.Failure("the running daemon is stopping; start the new one afresh"))
                    }
                    // Taken before anything stops: out of descriptors, the request is refused and every client is
                    // still served; a hand-over without the listening socket would fail after all were closed.
                    let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 3)
                    guard copy >= 0 else {
                        return .failure(.system("the running daemon cannot copy its listening socket; try again later"))
                    }
                    listener.replace = (connection, copy)
                    return .success(listener.channel)
                }
                switch outcome {
                case .success(let channel):
                    channel?.close(promise: nil)
                    return nil
                case .failure(let failure):
                    return failure.description
                }
            }
            return replaceListener
        } catch {
            logger.warning("notifyd --replace will not find this daemon", metadata: ["error": "\(error)"])
            return nil
        }
    }
}
