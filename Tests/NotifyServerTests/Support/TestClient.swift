import NIOCore
import NIOPosix
import NotifyWire

/// One frame received from the daemon, with its exact bytes (length prefix included).
struct ReceivedFrame: Sendable {
    var frame: ServerFrame
    var bytes: ByteBuffer
}

/// How a test connection ended.
enum ConnectionEnd: Sendable, Equatable, CustomStringConvertible {
    /// The daemon closed the connection cleanly (read returned 0).
    case endOfFile
    /// The connection failed (e.g. reset), or the daemon sent bytes that are not a valid frame.
    case failure(String)

    var description: String {
        switch self {
        case .endOfFile: "end of file"
        case .failure(let reason): reason
        }
    }
}

/// What a test connection observed next: a frame, or the end of the connection (sticky).
enum ClientEvent: Sendable {
    case frame(ReceivedFrame)
    case end(ConnectionEnd)
}

/// A raw protocol client for tests: writes encoded `ClientFrame`s (or arbitrary bytes) on a Unix socket and
/// collects the daemon's frames, decoded with `FrameAccumulator<ServerFrame>`, in arrival order.
///
/// Every wait has a timeout and fails with a message naming the client and what it waited for.
final class TestClient: Sendable {
    /// A name for messages; also sent as the `HELLO` client name by ``hello(version:)``.
    let name: String
    let channel: any Channel
    private let inbox: NIOLoopBoundBox<Inbox>

    private init(name: String, channel: any Channel, inbox: NIOLoopBoundBox<Inbox>) {
        self.name = name
        self.channel = channel
        self.inbox = inbox
    }

    /// Connects without sending anything.
    ///
    /// - Parameters:
    ///   - receiveBufferSize: if set, `SO_RCVBUF` for the socket (to make a stalled reader stall sooner).
    ///   - reading: whether to read from the socket from the start (see ``setReading(_:)``).
    static func connect(
        to path: String, name: String, receiveBufferSize: Int? = nil, reading: Bool = true
    ) async throws -> TestClient {
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        let inbox = NIOLoopBoundBox.makeBoxSendingValue(Inbox(), eventLoop: eventLoop)
        var bootstrap = ClientBootstrap(group: eventLoop)
            .channelOption(ChannelOptions.autoRead, value: reading)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(FrameCollector(clientName: name, inbox: inbox))
                }
            }
        if let receiveBufferSize {
            bootstrap = bootstrap.channelOption(ChannelOptions.socketOption(.so_rcvbuf), value: receiveBufferSize)
        }
        let channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
        return TestClient(name: name, channel: channel, inbox: inbox)
    }

    // MARK: Sending

    /// Writes the frames in one write.
    func send(_ frames: ClientFrame...) async throws {
        try await send(frames)
    }

    /// Writes the frames in one write.
    func send(_ frames: [ClientFrame]) async throws {
        var buffer = channel.allocator.buffer(capacity: 64 * frames.count)
        for frame in frames { frame.encode(into: &buffer) }
        try await sendBuffer(buffer)
    }

    /// Writes arbitrary bytes.
    func sendRaw(_ bytes: [UInt8]) async throws {
        try await sendBuffer(channel.allocator.buffer(bytes: bytes))
    }

    /// Writes `buffer`; fails if the kernel has not taken all of it within `timeout`.
    func sendBuffer(_ buffer: ByteBuffer, timeout: TimeAmount = defaultTimeout) async throws {
        let eventLoop = channel.eventLoop
        let result = eventLoop.makePromise(of: Void.self)
        startSending(buffer).cascade(to: result)
        let count = buffer.readableBytes
        let name = self.name
        let timer = eventLoop.scheduleTask(in: timeout) {
            result.fail(TestFailure("client '\(name)': a write of \(count) bytes did not complete within \(timeout.secondsDescription)"))
        }
        defer { timer.cancel() }
        try await result.futureResult.get()
    }

    /// Starts writing `buffer` without waiting for the write to complete.
    func startSending(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        channel.writeAndFlush(buffer)
    }

    /// Shuts down the sending side (`shutdown(fd, SHUT_WR)`); reading continues.
    func shutdownOutput() async throws {
        try await channel.close(mode: .output).get()
    }

    /// Stops or resumes reading from the socket (a stalled subscriber lets the daemon's queue fill).
    ///
    /// On a connection that is already closed this does nothing: what was received stays available.
    func setReading(_ reading: Bool) async throws {
        do {
            try await channel.setOption(ChannelOptions.autoRead, value: reading).get()
        } catch ChannelError.ioOnClosedChannel {
            return
        }
        if reading { channel.read() }
    }

    /// Writes `buffer` and closes the connection in the same event loop tick, without reading anything more.
    func sendAndClose(_ buffer: ByteBuffer) async throws {
        let channel = self.channel
        try await channel.eventLoop.flatSubmit {
            channel.writeAndFlush(buffer, promise: nil)
            return channel.close()
        }.get()
    }

    /// Writes `buffer`, then shuts down the sending side only (a half-close: the client still reads).
    func sendAndShutdownOutput(_ buffer: ByteBuffer) async throws {
        let channel = self.channel
        try await channel.eventLoop.flatSubmit {
            channel.writeAndFlush(buffer, promise: nil)
            return channel.close(mode: .output)
        }.get()
    }

    /// Closes the connection.
    func close() async {
        try? await channel.close().get()
    }

    // MARK: Receiving

    /// The next frame or the end of the connection; throws ``TestFailure`` if neither comes within `timeout`.
    func nextEvent(timeout: TimeAmount = defaultTimeout) async throws -> ClientEvent {
        let eventLoop = channel.eventLoop
        let name = self.name
        return try await eventLoop.flatSubmit { [inbox] () -> EventLoopFuture<ClientEvent> in
            let box = inbox.value
            if !box.frames.isEmpty { return eventLoop.makeSucceededFuture(.frame(box.frames.removeFirst())) }
            if let end = box.end { return eventLoop.makeSucceededFuture(.end(end)) }
            precondition(box.waiter == nil, "only one task may wait on a TestClient at a time")
            let promise = eventLoop.makePromise(of: ClientEvent.self)
            let timer = eventLoop.scheduleTask(in: timeout) {
                let box = inbox.value
                guard let waiter = box.waiter, waiter.promise.futureResult === promise.futureResult else { return }
                box.waiter = nil
                waiter.promise.fail(
                    TestFailure("client '\(name)': nothing received within \(timeout.secondsDescription)"))
            }
            box.waiter = (promise, timer)
            return promise.futureResult
        }.get()
    }

    /// The next frame with its bytes; throws if the connection ends first or nothing comes within `timeout`.
    func nextReceived(timeout: TimeAmount = defaultTimeout) async throws -> ReceivedFrame {
        switch try await nextEvent(timeout: timeout) {
        case .frame(let received): return received
        case .end(let end): throw TestFailure("client '\(name)': connection ended (\(end)) while waiting for a frame")
        }
    }

    /// The next frame; throws if the connection ends first or nothing comes within `timeout`.
    func next(timeout: TimeAmount = defaultTimeout) async throws -> ServerFrame {
        try await nextReceived(timeout: timeout).frame
    }

    /// Expects the connection to end next (no further frame); returns how it ended.
    @discardableResult
    func expectEnd(timeout: TimeAmount = defaultTimeout) async throws -> ConnectionEnd {
        switch try await nextEvent(timeout: timeout) {
        case .frame(let received):
            throw TestFailure("client '\(name)': expected the connection to end, got \(received.frame.summary)")
        case .end(let end): return end
        }
    }

    /// The next frame, which must be a `NOTIFICATION`.
    func nextNotification(timeout: TimeAmount = defaultTimeout) async throws -> NotificationFrame {
        let frame = try await next(timeout: timeout)
        guard let notification = frame.notification else {
            throw TestFailure("client '\(name)': expected NOTIFICATION, got \(frame.summary)")
        }
        return notification
    }

    /// The next frame, which must be an `ERROR`.
    func nextError(timeout: TimeAmount = defaultTimeout) async throws -> ErrorFrame {
        let frame = try await next(timeout: timeout)
        guard let error = frame.errorFrame else {
            throw TestFailure("client '\(name)': expected ERROR, got \(frame.summary)")
        }
        return error
    }

    // MARK: Requests

    /// Sends `HELLO` and expects `WELCOME`.
    @discardableResult
    func hello(version: UInt16 = ProtocolConstants.version) async throws -> ServerFrame.Welcome {
        try await send(.hello(ClientFrame.Hello(version: version, clientName: name)))
        let frame = try await next()
        guard case .welcome(let welcome) = frame else {
            throw TestFailure("client '\(name)': expected WELCOME, got \(frame.summary)")
        }
        return welcome
    }

    /// Sends `SUBSCRIBE` (without flags, so no `RETAINED` frames come first) and expects `OK` with the same
    /// request id.
    func subscribe(
        _ notificationName: String, subscriptionID: UInt32, requestID: UInt32, policy: DeliveryPolicy = .coalesce
    ) async throws {
        try await send(
            .testSubscribe(requestID: requestID, subscriptionID: subscriptionID, name: notificationName, policy: policy))
        try await expectOK(
            requestID, for: "SUBSCRIBE '\(notificationName)' (subscription \(subscriptionID), policy \(policy))")
    }

    /// Sends `UNSUBSCRIBE` and expects `OK` with the same request id.
    func unsubscribe(subscriptionID: UInt32, requestID: UInt32) async throws {
        try await send(.unsubscribe(requestID: requestID, subscriptionID: subscriptionID))
        try await expectOK(requestID, for: "UNSUBSCRIBE \(subscriptionID)")
    }

    private func expectOK(_ requestID: UInt32, for request: String) async throws {
        let frame = try await next()
        guard case .ok(requestID) = frame else {
            throw TestFailure("client '\(name)': expected OK(\(requestID)) for \(request), got \(frame.summary)")
        }
    }

    /// Sends a `POST` with the ack flag and expects `POSTED` with the same request id.
    ///
    /// Only for a connection that is not subscribed to `notificationName` itself (otherwise its own copy of the
    /// notification may come first).
    func postAcked(
        _ notificationName: String, payload: [UInt8] = [], requestID: UInt32
    ) async throws -> (sequence: UInt64, deliveredCount: UInt32) {
        try await send(
            .post(
                ClientFrame.Post(
                    requestID: requestID, flags: .ackWanted, name: notificationName,
                    payload: ByteBuffer(bytes: payload))))
        let frame = try await next()
        guard case .posted(requestID, let sequence, let deliveredCount) = frame else {
            throw TestFailure(
                "client '\(name)': expected POSTED(\(requestID)) for POST '\(notificationName)', got \(frame.summary)")
        }
        return (sequence, deliveredCount)
    }

    /// Sends `PING` and collects every frame received before the matching `PONG`.
    func barrier(requestID: UInt32 = 0xBA44_1E40) async throws -> [ServerFrame] {
        try await send(.ping(requestID: requestID))
        var before: [ServerFrame] = []
        while true {
            let frame = try await next()
            if case .pong(requestID) = frame { return before }
            before.append(frame)
        }
    }

    /// Sends `PING` and expects the matching `PONG` as the very next frame.
    func expectQuiet(requestID: UInt32 = 0xBA44_1E40) async throws {
        let before = try await barrier(requestID: requestID)
        guard before.isEmpty else {
            throw TestFailure(
                "client '\(name)': expected PONG(\(requestID)) with nothing before it, got "
                    + before.map(\.summary).joined(separator: ", "))
        }
    }
}
