import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NotifyWire

/// One frame received from the daemon, with its exact bytes (length prefix included).
package struct ReceivedFrame: Sendable {
    package var frame: ServerFrame
    package var bytes: ByteBuffer
}

/// How a test connection ended.
package enum ConnectionEnd: Sendable, Equatable, CustomStringConvertible {
    /// The daemon closed the connection cleanly (read returned 0).
    case endOfFile
    /// The connection failed (e.g. reset), or the daemon sent bytes that are not a valid frame.
    case failure(String)

    package var description: String {
        switch self {
        case .endOfFile: "end of file"
        case .failure(let reason): reason
        }
    }
}

/// What a test connection observed next: a frame, or the end of the connection (sticky).
package enum ClientEvent: Sendable {
    case frame(ReceivedFrame)
    case end(ConnectionEnd)
}

/// The one raw protocol client of the tests: writes encoded `ClientFrame`s (or arbitrary bytes) on a Unix socket,
/// as any uid/gid (``CredentialSwitch``), and collects the daemon's frames, decoded with
/// `FrameAccumulator<ServerFrame>`, in arrival order.
///
/// Every wait has a timeout and fails with a message naming the client and what it waited for.
package final class TestClient: Sendable {
    /// A name for messages; also sent as the `HELLO` client name by ``hello(version:)``.
    package let name: String
    /// The ids the daemon sees for this connection.
    package let identity: PeerIdentity
    package let channel: any Channel
    private let inbox: NIOLoopBoundBox<Inbox>
    private let requestCounter = NIOLockedValueBox<UInt32>(1_000)

    private init(name: String, identity: PeerIdentity, channel: any Channel, inbox: NIOLoopBoundBox<Inbox>) {
        self.name = name
        self.identity = identity
        self.channel = channel
        self.inbox = inbox
    }

    /// Connects without sending anything.
    ///
    /// - Parameters:
    ///   - identity: the uid/gid to connect as (the daemon reads them with `SO_PEERCRED`); other than root needs
    ///     the tests to run as root.
    ///   - receiveBufferSize: if set, `SO_RCVBUF` for the socket (to make a stalled reader stall sooner).
    ///   - reading: whether to read from the socket from the start (see ``setReading(_:)``).
    package static func connect(
        to path: String, name: String, as identity: PeerIdentity = .root, receiveBufferSize: Int? = nil,
        reading: Bool = true
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
        let channel: any Channel
        if identity == .root {
            if let receiveBufferSize {
                bootstrap = bootstrap.channelOption(ChannelOptions.socketOption(.so_rcvbuf), value: receiveBufferSize)
            }
            channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
        } else {
            let descriptor = try await CredentialSwitch.connect(to: path, as: identity, receiveBufferSize: receiveBufferSize)
            channel = try await bootstrap.withConnectedSocket(descriptor).get()
        }
        return TestClient(name: name, identity: identity, channel: channel, inbox: inbox)
    }

    /// A fresh request id (never 0), for the requests that pick their own.
    package func nextRequestID() -> UInt32 {
        requestCounter.withLockedValue { counter in
            counter += 1
            return counter
        }
    }

    // MARK: Sending

    /// Writes the frames in one write.
    package func send(_ frames: ClientFrame...) async throws {
        try await send(frames)
    }

    /// Writes the frames in one write.
    package func send(_ frames: [ClientFrame]) async throws {
        var buffer = channel.allocator.buffer(capacity: 64 * frames.count)
        for frame in frames { frame.encode(into: &buffer) }
        try await sendBuffer(buffer)
    }

    /// Writes arbitrary bytes.
    package func sendRaw(_ bytes: [UInt8]) async throws {
        try await sendBuffer(channel.allocator.buffer(bytes: bytes))
    }

    /// Writes `buffer`; fails if the kernel has not taken all of it within `timeout`.
    package func sendBuffer(_ buffer: ByteBuffer, timeout: TimeAmount = defaultTimeout) async throws {
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
    package func startSending(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        channel.writeAndFlush(buffer)
    }

    /// Shuts down the sending side (`shutdown(fd, SHUT_WR)`); reading continues.
    package func shutdownOutput() async throws {
        try await channel.close(mode: .output).get()
    }

    /// Stops or resumes reading from the socket (a stalled subscriber lets the daemon's queue fill).
    ///
    /// On a connection that is already closed this does nothing: what was received stays available.
    package func setReading(_ reading: Bool) async throws {
        do {
            try await channel.setOption(ChannelOptions.autoRead, value: reading).get()
        } catch ChannelError.ioOnClosedChannel {
            return
        }
        if reading { channel.read() }
    }

    /// Writes `buffer` and closes the connection in the same event loop tick, without reading anything more.
    package func sendAndClose(_ buffer: ByteBuffer) async throws {
        let channel = self.channel
        try await channel.eventLoop.flatSubmit {
            channel.writeAndFlush(buffer, promise: nil)
            return channel.close()
        }.get()
    }

    /// Writes `buffer`, then shuts down the sending side only (a half-close: the client still reads).
    package func sendAndShutdownOutput(_ buffer: ByteBuffer) async throws {
        let channel = self.channel
        try await channel.eventLoop.flatSubmit {
            channel.writeAndFlush(buffer, promise: nil)
            return channel.close(mode: .output)
        }.get()
    }

    /// Closes the connection.
    package func close() async {
        try? await channel.close().get()
    }

    // MARK: Receiving

    /// The next frame or the end of the connection; throws ``TestFailure`` if neither comes within `timeout`.
    package func nextEvent(timeout: TimeAmount = defaultTimeout) async throws -> ClientEvent {
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
    package func nextReceived(timeout: TimeAmount = defaultTimeout) async throws -> ReceivedFrame {
        switch try await nextEvent(timeout: timeout) {
        case .frame(let received): return received
        case .end(let end): throw TestFailure("client '\(name)': connection ended (\(end)) while waiting for a frame")
        }
    }

    /// The next frame; throws if the connection ends first or nothing comes within `timeout`.
    package func next(timeout: TimeAmount = defaultTimeout) async throws -> ServerFrame {
        try await nextReceived(timeout: timeout).frame
    }

    /// Expects the connection to end next (no further frame); returns how it ended.
    @discardableResult
    package func expectEnd(timeout: TimeAmount = defaultTimeout) async throws -> ConnectionEnd {
        switch try await nextEvent(timeout: timeout) {
        case .frame(let received):
            throw TestFailure("client '\(name)': expected the connection to end, got \(received.frame.summary)")
        case .end(let end): return end
        }
    }

    /// The next frame, which must be a `NOTIFICATION`.
    package func nextNotification(timeout: TimeAmount = defaultTimeout) async throws -> NotificationFrame {
        let frame = try await next(timeout: timeout)
        guard let notification = frame.notification else {
            throw TestFailure("client '\(name)': expected NOTIFICATION, got \(frame.summary)")
        }
        return notification
    }

    /// The next frame, which must be an `ERROR`.
    package func nextError(timeout: TimeAmount = defaultTimeout) async throws -> ErrorFrame {
        let frame = try await next(timeout: timeout)
        guard let error = frame.errorFrame else {
            throw TestFailure("client '\(name)': expected ERROR, got \(frame.summary)")
        }
        return error
    }

    /// Frames until the connection ends; fails if it does not end within `timeout` of the last frame.
    package func framesUntilEnd(timeout: TimeAmount = defaultTimeout) async throws -> (frames: [ServerFrame], end: ConnectionEnd) {
        var frames: [ServerFrame] = []
        while true {
            switch try await nextEvent(timeout: timeout) {
            case .frame(let received): frames.append(received.frame)
            case .end(let end): return (frames, end)
            }
        }
    }

    /// Hands every frame, in order and undecoded (its type and body), to `handler` on the connection's event loop
    /// until it returns false (then returns `nil`) or the connection ends (then returns how). For floods too long
    /// to await, or even decode, frame by frame; fails if `timeout` passes first.
    package func consumeFrames(
        timeout: TimeAmount, _ handler: @escaping @Sendable (_ type: UInt8, _ body: ByteBuffer) -> Bool
    ) async throws -> ConnectionEnd? {
        let eventLoop = channel.eventLoop
        let name = self.name
        return try await eventLoop.flatSubmit { [inbox] () -> EventLoopFuture<ConnectionEnd?> in
            let box = inbox.value
            precondition(box.waiter == nil && box.consumer == nil, "only one task may wait on a TestClient at a time")
            let promise = eventLoop.makePromise(of: ConnectionEnd?.self)
            let timer = eventLoop.scheduleTask(in: timeout) {
                guard inbox.value.consumer != nil else { return }
                inbox.value.consumer = nil
                promise.fail(TestFailure("client '\(name)': frames still wanted after \(timeout.secondsDescription)"))
            }
            box.consumer = (handler, promise, timer)
            while let received = box.frames.popFirst() {
                if !box.consume(received.bytes) { return promise.futureResult }
            }
            if let end = box.end {
                box.consumer = nil
                timer.cancel()
                promise.succeed(end)
            }
            return promise.futureResult
        }.get()
    }

    // MARK: Requests

    /// Sends `HELLO` and expects `WELCOME`.
    @discardableResult
    package func hello(version: UInt16 = ProtocolConstants.version) async throws -> ServerFrame.Welcome {
        try await send(.hello(ClientFrame.Hello(version: version, clientName: name)))
        let frame = try await next()
        guard case .welcome(let welcome) = frame else {
            throw TestFailure("client '\(name)': expected WELCOME, got \(frame.summary)")
        }
        return welcome
    }

    /// Sends `SUBSCRIBE` (without flags, so no `RETAINED` frames come first) and expects `OK` with the same
    /// request id.
    package func subscribe(
        _ notificationName: String, subscriptionID: UInt32, requestID: UInt32, policy: DeliveryPolicy = .coalesce
    ) async throws {
        try await send(
            .testSubscribe(requestID: requestID, subscriptionID: subscriptionID, name: notificationName, policy: policy))
        try await expectOK(
            requestID, for: "SUBSCRIBE '\(notificationName)' (subscription \(subscriptionID), policy \(policy))")
    }

    /// Sends `UNSUBSCRIBE` and expects `OK` with the same request id.
    package func unsubscribe(subscriptionID: UInt32, requestID: UInt32) async throws {
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
    package func postAcked(
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

    /// Sends `PING` and collects every frame received before the matching `PONG`: an ordering barrier.
    package func barrier(requestID: UInt32 = 0xBA44_1E40) async throws -> [ServerFrame] {
        try await send(.ping(requestID: requestID))
        var before: [ServerFrame] = []
        while true {
            let frame = try await next()
            if case .pong(requestID) = frame { return before }
            before.append(frame)
        }
    }

    /// Sends `PING` and expects the matching `PONG` as the very next frame (`why` explains it in the failure).
    package func expectQuiet(_ why: String? = nil, requestID: UInt32 = 0xBA44_1E40) async throws {
        let before = try await barrier(requestID: requestID)
        guard before.isEmpty else {
            throw TestFailure(
                "client '\(name)': expected PONG(\(requestID)) with nothing before it\(why.map { " (\($0))" } ?? ""), got "
                    + before.map(\.summary).joined(separator: ", "))
        }
    }

    // MARK: Requests with ids of their own

    /// Sends the request built with a fresh id and reads up to its answer (`OK`, `POSTED`, `PONG`, `STATE`,
    /// `QUERY_RESULT` or `ERROR` with that id); returns the answer and the frames that came before it.
    package func request(_ build: (UInt32) -> ClientFrame) async throws -> (reply: ServerFrame, before: [ServerFrame]) {
        let requestID = nextRequestID()
        try await send(build(requestID))
        var before: [ServerFrame] = []
        while true {
            let received = try await next()
            if received.answeredRequestID == requestID { return (received, before) }
            before.append(received)
        }
    }

    /// Sends the request and expects `OK`; returns the frames before it.
    @discardableResult
    package func expectOK(_ what: String, _ build: (UInt32) -> ClientFrame) async throws -> [ServerFrame] {
        let (reply, before) = try await request(build)
        guard case .ok = reply else {
            throw TestFailure("client '\(name)' (\(identity)): expected OK for \(what), got \(reply.summary)")
        }
        return before
    }

    /// Sends the request and expects `ERROR`; returns it.
    package func expectError(_ what: String, _ build: (UInt32) -> ClientFrame) async throws -> ErrorFrame {
        let (reply, _) = try await request(build)
        guard case .error(let error) = reply else {
            throw TestFailure("client '\(name)' (\(identity)): expected ERROR for \(what), got \(reply.summary)")
        }
        return error
    }

    /// Subscribes and expects `OK`; returns the frames before the `OK` (the `RETAINED` ones, with `retained`).
    @discardableResult
    package func subscribe(
        _ pattern: String, id: UInt32, policy: DeliveryPolicy = .coalesce, retained: Bool = false
    ) async throws -> [ServerFrame] {
        try await expectOK("SUBSCRIBE '\(pattern)'") {
            .testSubscribe(
                requestID: $0, subscriptionID: id, name: pattern, policy: policy, flags: retained ? .sendRetained : [])
        }
    }

    /// Subscribes and expects `ERROR`.
    package func subscribeRefused(_ pattern: String, id: UInt32, policy: DeliveryPolicy = .coalesce) async throws -> ErrorFrame {
        try await expectError("SUBSCRIBE '\(pattern)'") {
            .testSubscribe(requestID: $0, subscriptionID: id, name: pattern, policy: policy)
        }
    }

    package func unsubscribe(id: UInt32) async throws {
        try await expectOK("UNSUBSCRIBE \(id)") { .unsubscribe(requestID: $0, subscriptionID: id) }
    }

    /// Posts with the ack flag and expects `POSTED`: the sequence and delivered count.
    ///
    /// Frames that arrive before the `POSTED` (this connection's own copy, when it is subscribed) are returned too.
    @discardableResult
    package func post(
        _ name: String, _ payload: String = "", retain: Bool = false
    ) async throws -> (sequence: UInt64, delivered: UInt32, before: [ServerFrame]) {
        let (reply, before) = try await request { Self.ackedPost($0, name, payload, retain: retain) }
        guard case .posted(_, let sequence, let delivered) = reply else {
            throw TestFailure("client '\(self.name)' (\(identity)): expected POSTED for '\(name)', got \(reply.summary)")
        }
        return (sequence, delivered, before)
    }

    /// Posts with the ack flag and expects `ERROR`.
    package func postRefused(_ name: String, _ payload: String = "", retain: Bool = false) async throws -> ErrorFrame {
        try await expectError("POST '\(name)'") { Self.ackedPost($0, name, payload, retain: retain) }
    }

    private static func ackedPost(_ requestID: UInt32, _ name: String, _ payload: String, retain: Bool) -> ClientFrame {
        .post(
            ClientFrame.Post(
                requestID: requestID, flags: retain ? [.ackWanted, .retain] : .ackWanted, name: name,
                payload: ByteBuffer(string: payload)))
    }

    /// Sends a fire-and-forget post (no reply unless it is refused).
    package func postUnacknowledged(_ name: String, _ payload: ByteBuffer) async throws {
        try await send(.post(ClientFrame.Post(requestID: nextRequestID(), name: name, payload: payload)))
    }

    package func setState(_ name: String, _ value: UInt64) async throws {
        try await expectOK("SET_STATE '\(name)'") { .setState(requestID: $0, name: name, value: value) }
    }

    package func setStateRefused(_ name: String, _ value: UInt64) async throws -> ErrorFrame {
        try await expectError("SET_STATE '\(name)'") { .setState(requestID: $0, name: name, value: value) }
    }

    package func state(of name: String) async throws -> UInt64? {
        let (reply, _) = try await request { .getState(requestID: $0, name: name) }
        guard case .state(_, let value) = reply else {
            throw TestFailure("client '\(self.name)': expected STATE for '\(name)', got \(reply.summary)")
        }
        return value
    }

    /// `GET_STATE`, expecting `ERROR`.
    package func stateRefused(of name: String) async throws -> ErrorFrame {
        try await expectError("GET_STATE '\(name)'") { .getState(requestID: $0, name: name) }
    }

    /// A `QUERY`, decoded from its JSON answer.
    package func query<T: Decodable>(_ type: T.Type, _ kind: QueryKind, _ argument: String = "") async throws -> T {
        try JSONDecoder().decode(T.self, from: try await queryData(kind, argument))
    }

    /// The raw JSON object of a `QUERY` answer (to check the field names on the wire).
    package func queryJSON(_ kind: QueryKind, _ argument: String = "") async throws -> Any {
        try JSONSerialization.jsonObject(with: try await queryData(kind, argument))
    }

    private func queryData(_ kind: QueryKind, _ argument: String) async throws -> Data {
        let (reply, _) = try await request { .query(requestID: $0, kind: kind.rawValue, argument: argument) }
        guard case .queryResult(_, let json) = reply else {
            throw TestFailure("client '\(name)': expected QUERY_RESULT for \(kind), got \(reply.summary)")
        }
        return Data(json.readableBytesView)
    }
}

extension ClientFrame {
    /// A `SUBSCRIBE` frame (kept in one place, so that a change of the frame's fields touches only this).
    ///
    /// The defaults are what a plain subscription asks for: the `coalesce` policy, no flags.
    package static func testSubscribe(
        requestID: UInt32, subscriptionID: UInt32, name: String, policy: DeliveryPolicy = .coalesce,
        flags: SubscribeFlags = []
    ) -> ClientFrame {
        .subscribe(
            ClientFrame.Subscribe(
                requestID: requestID, subscriptionID: subscriptionID, flags: flags, policy: policy, pattern: name))
    }
}
