#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import NIOCore
import NIOPosix
import NotifyWire
import Synchronization
import Testing

@testable import NotifyServer

// Support for the issue 4 suites: an in-process server whose socket every uid may reach, and raw protocol
// clients that can connect as any uid/gid (the kernel's SO_PEERCRED decides what the daemon sees).

/// A loud failure of an issue 4 helper: a wait that timed out, a reply that was not the one expected.
struct Issue4Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// How long any single wait in the issue 4 suites may take before the test fails.
let issue4Timeout = TimeAmount.seconds(15)

/// Runs `body`, failing with `what` if it takes longer than `seconds`.
func issue4WithTimeout<T: Sendable>(
    _ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw Issue4Failure("timed out after \(seconds) s: \(what)")
        }
        return value
    }
}

// MARK: Identities

/// The uid and gid a raw client connects with. The ids below are not in `/etc/passwd`, so the daemon knows
/// no supplementary groups for them: the primary gid is the only group.
struct PeerIdentity: Sendable, Hashable, CustomStringConvertible {
    var uid: UInt32
    var gid: UInt32

    static let root = PeerIdentity(uid: 0, gid: 0)
    static let alice = PeerIdentity(uid: 4201, gid: 4301)
    static let bob = PeerIdentity(uid: 4202, gid: 4302)
    /// Primary group 4300, the group of the `group=4300` rules in the access tests.
    static let carol = PeerIdentity(uid: 4203, gid: 4300)

    var description: String { "uid \(uid)/gid \(gid)" }
}

/// Connects Unix stream sockets with another effective uid/gid, from a dedicated thread.
///
/// The raw `setresuid`/`setresgid` system calls change the credentials of the calling thread only (glibc's
/// wrappers would change every thread of the process), and `connect(2)` records the connecting thread's
/// effective ids as the socket's peer credentials. The thread switches, connects, switches back to root and
/// ends; no other thread ever runs with the other ids.
enum CredentialSwitch {
    #if arch(x86_64)
    private static let setresuidNumber = 117
    private static let setresgidNumber = 119
    #elseif arch(arm64)
    private static let setresuidNumber = 147
    private static let setresgidNumber = 149
    #endif

    private typealias RawSyscall = @convention(c) (Int, Int, Int, Int) -> Int

    /// Connects to `path` as `identity` (root connects directly) and returns the descriptor.
    static func connect(to path: String, as identity: PeerIdentity, receiveBufferSize: Int?) async throws -> Int32 {
        if identity == .root {
            return try connectHere(path, receiveBufferSize: receiveBufferSize)
        }
        return try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result { try connectSwitched(path, identity, receiveBufferSize) })
            }
            thread.start()
        }
    }

    private static func connectSwitched(_ path: String, _ identity: PeerIdentity, _ receiveBufferSize: Int?) throws -> Int32 {
        guard geteuid() == 0 else { throw Issue4Failure("the tests must run as root to connect as \(identity)") }
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "syscall") else {
            throw Issue4Failure("cannot find syscall(2) in the process")
        }
        let rawSyscall = unsafeBitCast(symbol, to: RawSyscall.self)
        // The group first, while the thread may still change it; -1 leaves the real and saved ids (root) alone.
        guard rawSyscall(setresgidNumber, -1, Int(identity.gid), -1) == 0 else {
            throw Issue4Failure("setresgid(\(identity.gid)) failed: errno \(errno)")
        }
        guard rawSyscall(setresuidNumber, -1, Int(identity.uid), -1) == 0 else {
            _ = rawSyscall(setresgidNumber, -1, 0, -1)
            throw Issue4Failure("setresuid(\(identity.uid)) failed: errno \(errno)")
        }
        defer {
            // The saved uid is still 0, so the thread may become root again (which restores its capabilities).
            let uidBack = rawSyscall(setresuidNumber, -1, 0, -1)
            let gidBack = rawSyscall(setresgidNumber, -1, 0, -1)
            precondition(uidBack == 0 && gidBack == 0 && geteuid() == 0 && getegid() == 0, "cannot switch the thread back to root")
        }
        guard geteuid() == identity.uid, getegid() == identity.gid else {
            throw Issue4Failure("the thread did not take the ids of \(identity)")
        }
        return try connectHere(path, receiveBufferSize: receiveBufferSize)
    }

    private static func connectHere(_ path: String, receiveBufferSize: Int?) throws -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw Issue4Failure("socket() failed: errno \(errno)") }
        if var size = receiveBufferSize.map(Int32.init) {
            _ = setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(descriptor)
            throw Issue4Failure("socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            close(descriptor)
            throw Issue4Failure("connect(\(path)) failed: \(String(cString: strerror(code)))")
        }
        return descriptor
    }
}

// MARK: Server

/// A real ``NotifyServer`` in this process, on `/tmp/i4s-XXXXXX/s.sock` with mode 0666 in a 0755 directory, so
/// clients of any uid can connect.
final class Issue4Server: Sendable {
    let server: NotifyServer
    let directory: String
    let socketPath: String
    private let task: Task<Void, any Error>

    private init(server: NotifyServer, directory: String, socketPath: String, task: Task<Void, any Error>) {
        self.server = server
        self.directory = directory
        self.socketPath = socketPath
        self.task = task
    }

    static let logger: Logger = {
        if ProcessInfo.processInfo.environment["NOTIFYD_TEST_LOG"] != nil {
            var logger = Logger(label: "notifyd.issue4")
            logger.logLevel = .trace
            return logger
        }
        return Logger(label: "notifyd.issue4", factory: { _ in SwiftLogNoOpLogHandler() })
    }()

    static func start(_ configure: (inout ServerConfiguration) -> Void = { _ in }) async throws -> Issue4Server {
        var template = Array("/tmp/i4s-XXXXXX".utf8CString)
        guard let created = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw Issue4Failure("mkdtemp failed: errno \(errno)")
        }
        let directory = String(cString: created)
        guard chmod(directory, 0o755) == 0 else { throw Issue4Failure("chmod \(directory) failed: errno \(errno)") }
        let path = directory + "/s.sock"
        var configuration = ServerConfiguration(listenAddress: .path(path), socketMode: 0o666, shutdownDeadlineSeconds: 10)
        configure(&configuration)
        let (listening, continuation) = AsyncStream<Bool>.makeStream()
        let server = NotifyServer(configuration: configuration, logger: logger) { _ in
            continuation.yield(true)
        }
        let task = Task {
            defer { continuation.finish() }
            try await server.run()
        }
        let listened = try await issue4WithTimeout(15, "the server at \(path) to listen") {
            for await value in listening { return value }
            return false
        }
        guard listened else {
            _ = try? await task.value
            try? FileManager.default.removeItem(atPath: directory)
            throw Issue4Failure("the server at \(path) stopped before listening")
        }
        return Issue4Server(server: server, directory: directory, socketPath: path, task: task)
    }

    /// Connects a raw client as `identity` and completes the handshake.
    func connect(
        _ label: String, as identity: PeerIdentity = .root, receiveBufferSize: Int? = nil
    ) async throws -> RawPeer {
        let peer = try await RawPeer.connect(
            to: socketPath, label: label, as: identity, receiveBufferSize: receiveBufferSize)
        _ = try await peer.hello()
        return peer
    }

    /// The daemon-wide figures (as `QUERY status` reports them).
    func status() async throws -> Introspection.Status {
        try #require(await server.status(), "the server is running, so it has a status")
    }

    /// Polls the status until `condition` holds: only for effects nothing replies to (a peer's close).
    @discardableResult
    func waitForStatus(
        _ what: String, timeout: Double = 15, _ condition: (Introspection.Status) -> Bool
    ) async throws -> Introspection.Status {
        let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
        while true {
            let status = try await status()
            if condition(status) { return status }
            if ContinuousClock.now > deadline {
                throw Issue4Failure("timed out after \(timeout) s waiting for the server status to show \(what): \(status)")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func stop() async throws {
        server.shutdown()
        let task = self.task
        try await issue4WithTimeout(20, "the server to stop") { try await task.value }
        try? FileManager.default.removeItem(atPath: directory)
    }

    func abandon() {
        server.shutdown()
        task.cancel()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Runs `body` against a fresh server and stops it afterwards (also when `body` throws).
func withIssue4Server(
    _ configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (Issue4Server) async throws -> Void
) async throws {
    let server = try await Issue4Server.start(configure)
    do {
        try await body(server)
    } catch {
        server.abandon()
        throw error
    }
    try await server.stop()
}

/// Parses an access configuration written in the tests (source name `test.conf`); fails the test when it does
/// not parse.
func issue4Access(_ text: String, source: String = "test.conf") throws -> AccessConfiguration {
    do {
        return try AccessConfiguration.parse(text, source: source)
    } catch {
        throw Issue4Failure("the test configuration does not parse: \(error)")
    }
}

// MARK: Raw client

/// What a raw client observed next.
enum RawEvent: Sendable {
    case frame(ServerFrame)
    case end(String)
}

/// The frames of one raw client, on its channel's event loop.
final class RawInbox {
    var frames = CircularBuffer<ServerFrame>()
    var end: String?
    var waiter: (promise: EventLoopPromise<RawEvent>, timeout: Scheduled<Void>)?

    func deliver(_ event: RawEvent) {
        if case .end(let reason) = event {
            guard end == nil else { return }
            end = reason
        }
        if let waiter {
            // A waiter only exists while nothing is queued, so handing it this event keeps the order.
            self.waiter = nil
            waiter.timeout.cancel()
            waiter.promise.succeed(event)
        } else if case .frame(let frame) = event {
            frames.append(frame)
        }
    }
}

/// Decodes the daemon's frames with `FrameAccumulator<ServerFrame>`.
final class RawFrameDecoder: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 24)
    private let inbox: NIOLoopBoundBox<RawInbox>
    private var failed = false

    init(inbox: NIOLoopBoundBox<RawInbox>) {
        self.inbox = inbox
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        accumulator.append(unwrapInboundIn(data))
        do throws(WireDecodingError) {
            while let frame = try accumulator.next() {
                inbox.value.deliver(.frame(frame))
            }
        } catch {
            failed = true
            inbox.value.deliver(.end("the daemon sent an undecodable frame: \(error)"))
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        let partial = accumulator.bufferedBytes
        inbox.value.deliver(.end(partial == 0 ? "end of file" : "end of file inside a frame (\(partial) bytes)"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        inbox.value.deliver(.end("connection error: \(error)"))
        context.close(promise: nil)
    }
}

/// A raw protocol client: writes `ClientFrame`s, collects the daemon's `ServerFrame`s in order. Every wait has a
/// timeout and fails naming the client and what it waited for.
final class RawPeer: Sendable {
    let label: String
    let identity: PeerIdentity
    let channel: any Channel
    private let inbox: NIOLoopBoundBox<RawInbox>
    private let requestCounter = Mutex<UInt32>(1_000)

    private init(label: String, identity: PeerIdentity, channel: any Channel, inbox: NIOLoopBoundBox<RawInbox>) {
        self.label = label
        self.identity = identity
        self.channel = channel
        self.inbox = inbox
    }

    /// Connects as `identity` without sending anything.
    static func connect(
        to path: String, label: String, as identity: PeerIdentity = .root, receiveBufferSize: Int? = nil
    ) async throws -> RawPeer {
        let descriptor = try await CredentialSwitch.connect(to: path, as: identity, receiveBufferSize: receiveBufferSize)
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        let inbox = NIOLoopBoundBox.makeBoxSendingValue(RawInbox(), eventLoop: eventLoop)
        let channel = try await ClientBootstrap(group: eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(RawFrameDecoder(inbox: inbox))
                }
            }
            .withConnectedSocket(descriptor)
            .get()
        return RawPeer(label: label, identity: identity, channel: channel, inbox: inbox)
    }

    /// A fresh request id (never 0).
    func nextRequestID() -> UInt32 {
        requestCounter.withLock { counter in
            counter += 1
            return counter
        }
    }

    // MARK: Sending

    func send(_ frames: ClientFrame...) async throws {
        try await send(frames)
    }

    /// Writes the frames in one write.
    func send(_ frames: [ClientFrame]) async throws {
        var buffer = channel.allocator.buffer(capacity: 64 * max(frames.count, 1))
        for frame in frames { frame.encode(into: &buffer) }
        try await sendBuffer(buffer)
    }

    /// Writes `buffer`; fails if the kernel has not taken all of it within the timeout.
    func sendBuffer(_ buffer: ByteBuffer, timeout: TimeAmount = issue4Timeout) async throws {
        let eventLoop = channel.eventLoop
        let result = eventLoop.makePromise(of: Void.self)
        channel.writeAndFlush(buffer).cascade(to: result)
        let count = buffer.readableBytes
        let label = self.label
        let timer = eventLoop.scheduleTask(in: timeout) {
            result.fail(Issue4Failure("client '\(label)': a write of \(count) bytes did not complete in time"))
        }
        defer { timer.cancel() }
        try await result.futureResult.get()
    }

    /// Stops or resumes reading from the socket (a stalled subscriber lets the daemon's queue fill).
    func setReading(_ reading: Bool) async throws {
        do {
            try await channel.setOption(ChannelOptions.autoRead, value: reading).get()
        } catch ChannelError.ioOnClosedChannel {
            return
        }
        if reading { channel.read() }
    }

    func close() async {
        try? await channel.close().get()
    }

    // MARK: Receiving

    /// The next frame, or the end of the connection.
    func nextEvent(timeout: TimeAmount = issue4Timeout) async throws -> RawEvent {
        let eventLoop = channel.eventLoop
        let inbox = self.inbox
        let label = self.label
        return try await eventLoop.flatSubmit { () -> EventLoopFuture<RawEvent> in
            let box = inbox.value
            if let frame = box.frames.popFirst() { return eventLoop.makeSucceededFuture(.frame(frame)) }
            if let end = box.end { return eventLoop.makeSucceededFuture(.end(end)) }
            let promise = eventLoop.makePromise(of: RawEvent.self)
            let timer = eventLoop.scheduleTask(in: timeout) {
                if inbox.value.waiter != nil {
                    inbox.value.waiter = nil
                    promise.fail(Issue4Failure("client '\(label)': nothing arrived within \(timeout.nanoseconds / 1_000_000_000) s"))
                }
            }
            box.waiter = (promise, timer)
            return promise.futureResult
        }.get()
    }

    /// The next frame; fails if the connection ends first.
    func next(timeout: TimeAmount = issue4Timeout) async throws -> ServerFrame {
        switch try await nextEvent(timeout: timeout) {
        case .frame(let frame): return frame
        case .end(let reason): throw Issue4Failure("client '\(label)': the connection ended (\(reason)) while waiting for a frame")
        }
    }

    /// Frames until the connection ends; fails if it does not end within the timeout.
    func framesUntilEnd(timeout: TimeAmount = issue4Timeout) async throws -> (frames: [ServerFrame], end: String) {
        var frames: [ServerFrame] = []
        while true {
            switch try await nextEvent(timeout: timeout) {
            case .frame(let frame): frames.append(frame)
            case .end(let reason): return (frames, reason)
            }
        }
    }

    /// The next frame, which must be a notification (`NOTIFICATION`).
    func nextNotification(timeout: TimeAmount = issue4Timeout) async throws -> NotificationFrame {
        let frame = try await next(timeout: timeout)
        guard case .notification(let notification) = frame else {
            throw Issue4Failure("client '\(label)': expected NOTIFICATION, got \(frame.issue4Text)")
        }
        return notification
    }

    // MARK: Requests

    /// Sends `HELLO` and expects `WELCOME`.
    func hello() async throws -> ServerFrame.Welcome {
        try await send(.hello(ClientFrame.Hello(clientName: label)))
        let frame = try await next()
        guard case .welcome(let welcome) = frame else {
            throw Issue4Failure("client '\(label)' (\(identity)): expected WELCOME, got \(frame.issue4Text)")
        }
        return welcome
    }

    /// Sends the request built with a fresh id and reads up to its answer (`OK`, `POSTED`, `PONG`, `STATE`,
    /// `QUERY_RESULT` or `ERROR` with that id); returns the answer and the frames that came before it.
    func request(_ build: (UInt32) -> ClientFrame) async throws -> (reply: ServerFrame, before: [ServerFrame]) {
        let requestID = nextRequestID()
        let frame = build(requestID)
        try await send(frame)
        var before: [ServerFrame] = []
        while true {
            let received = try await next()
            if received.issue4AnsweredRequest == requestID { return (received, before) }
            before.append(received)
        }
    }

    /// Sends the request and expects `OK`; returns the frames before it.
    @discardableResult
    func expectOK(
        _ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ build: (UInt32) -> ClientFrame
    ) async throws -> [ServerFrame] {
        let (reply, before) = try await request(build)
        guard case .ok = reply else {
            throw Issue4Failure("client '\(label)' (\(identity)): expected OK for \(what), got \(reply.issue4Text)")
        }
        return before
    }

    /// Sends the request and expects `ERROR`; returns it.
    func expectError(_ what: String, _ build: (UInt32) -> ClientFrame) async throws -> ErrorFrame {
        let (reply, _) = try await request(build)
        guard case .error(let error) = reply else {
            throw Issue4Failure("client '\(label)' (\(identity)): expected ERROR for \(what), got \(reply.issue4Text)")
        }
        return error
    }

    /// Subscribes and expects `OK`; returns the frames before the `OK` (the `RETAINED` ones, with `retained`).
    @discardableResult
    func subscribe(
        _ pattern: String, id: UInt32, policy: DeliveryPolicy = .coalesce, retained: Bool = false
    ) async throws -> [ServerFrame] {
        try await expectOK("SUBSCRIBE '\(pattern)'") {
            .subscribe(
                ClientFrame.Subscribe(
                    requestID: $0, subscriptionID: id, flags: retained ? .sendRetained : [], policy: policy,
                    pattern: pattern))
        }
    }

    /// Subscribes and expects `ERROR`.
    func subscribeRefused(_ pattern: String, id: UInt32, policy: DeliveryPolicy = .coalesce) async throws -> ErrorFrame {
        try await expectError("SUBSCRIBE '\(pattern)'") {
            .subscribe(ClientFrame.Subscribe(requestID: $0, subscriptionID: id, policy: policy, pattern: pattern))
        }
    }

    func unsubscribe(id: UInt32) async throws {
        try await expectOK("UNSUBSCRIBE \(id)") { .unsubscribe(requestID: $0, subscriptionID: id) }
    }

    /// Posts with the ack flag and expects `POSTED`: the sequence and delivered count.
    ///
    /// Frames that arrive before the `POSTED` (this connection's own copy, when it is subscribed) are returned too.
    @discardableResult
    func post(
        _ name: String, _ payload: String = "", retain: Bool = false
    ) async throws -> (sequence: UInt64, delivered: UInt32, before: [ServerFrame]) {
        let (reply, before) = try await request {
            .post(
                ClientFrame.Post(
                    requestID: $0, flags: retain ? [.ackWanted, .retain] : .ackWanted, name: name,
                    payload: ByteBuffer(string: payload)))
        }
        guard case .posted(_, let sequence, let delivered) = reply else {
            throw Issue4Failure("client '\(label)' (\(identity)): expected POSTED for '\(name)', got \(reply.issue4Text)")
        }
        return (sequence, delivered, before)
    }

    /// Posts with the ack flag and expects `ERROR`.
    func postRefused(_ name: String, _ payload: String = "", retain: Bool = false) async throws -> ErrorFrame {
        try await expectError("POST '\(name)'") {
            .post(
                ClientFrame.Post(
                    requestID: $0, flags: retain ? [.ackWanted, .retain] : .ackWanted, name: name,
                    payload: ByteBuffer(string: payload)))
        }
    }

    /// Sends a fire-and-forget post (no reply unless it is refused).
    func postUnacknowledged(_ name: String, _ payload: ByteBuffer) async throws {
        try await send(.post(ClientFrame.Post(requestID: nextRequestID(), name: name, payload: payload)))
    }

    func setState(_ name: String, _ value: UInt64) async throws {
        try await expectOK("SET_STATE '\(name)'") { .setState(requestID: $0, name: name, value: value) }
    }

    func setStateRefused(_ name: String, _ value: UInt64) async throws -> ErrorFrame {
        try await expectError("SET_STATE '\(name)'") { .setState(requestID: $0, name: name, value: value) }
    }

    func state(of name: String) async throws -> UInt64? {
        let (reply, _) = try await request { .getState(requestID: $0, name: name) }
        guard case .state(_, let value) = reply else {
            throw Issue4Failure("client '\(label)': expected STATE for '\(name)', got \(reply.issue4Text)")
        }
        return value
    }

    /// `GET_STATE`, expecting `ERROR`.
    func stateRefused(of name: String) async throws -> ErrorFrame {
        try await expectError("GET_STATE '\(name)'") { .getState(requestID: $0, name: name) }
    }

    /// A `QUERY`, decoded from its JSON answer.
    func query<T: Decodable>(_ type: T.Type, _ kind: QueryKind, _ argument: String = "") async throws -> T {
        let (reply, _) = try await request { .query(requestID: $0, kind: kind.rawValue, argument: argument) }
        guard case .queryResult(_, let json) = reply else {
            throw Issue4Failure("client '\(label)': expected QUERY_RESULT for \(kind), got \(reply.issue4Text)")
        }
        return try JSONDecoder().decode(T.self, from: Data(json.readableBytesView))
    }

    /// The raw JSON object of a `QUERY` answer (to check the field names on the wire).
    func queryJSON(_ kind: QueryKind, _ argument: String = "") async throws -> Any {
        let (reply, _) = try await request { .query(requestID: $0, kind: kind.rawValue, argument: argument) }
        guard case .queryResult(_, let json) = reply else {
            throw Issue4Failure("client '\(label)': expected QUERY_RESULT for \(kind), got \(reply.issue4Text)")
        }
        return try JSONSerialization.jsonObject(with: Data(json.readableBytesView))
    }

    /// Sends `PING` and returns every frame received before the `PONG`: an ordering barrier.
    func barrier() async throws -> [ServerFrame] {
        let (_, before) = try await request { .ping(requestID: $0) }
        return before
    }

    /// A barrier that must find nothing before the `PONG`.
    func expectQuiet(_ why: String) async throws {
        let before = try await barrier()
        guard before.isEmpty else {
            throw Issue4Failure(
                "client '\(label)': expected nothing before PONG (\(why)), got " + before.map(\.issue4Text).joined(separator: ", "))
        }
    }
}

// MARK: Frame helpers

extension ServerFrame {
    /// A short description for failure messages.
    var issue4Text: String {
        switch self {
        case .welcome(let welcome): "WELCOME(pid \(welcome.daemonPID))"
        case .ok(let id): "OK(\(id))"
        case .posted(let id, let sequence, let delivered): "POSTED(\(id), sequence \(sequence), delivered \(delivered))"
        case .pong(let id): "PONG(\(id))"
        case .notification(let n): "NOTIFICATION(#\(n.sequence) '\(n.name)' \(n.payloadText))"
        case .notificationMerged(let merged, let n): "NOTIFICATION_MERGED(+\(merged), #\(n.sequence) '\(n.name)' \(n.payloadText))"
        case .retained(let id, let n): "RETAINED(\(id), #\(n.sequence) '\(n.name)' \(n.payloadText))"
        case .overflow(let subscription, let dropped): "OVERFLOW(subscription \(subscription), dropped \(dropped))"
        case .state(let id, let value): "STATE(\(id), \(value.map(String.init) ?? "unset"))"
        case .queryResult(let id, let json): "QUERY_RESULT(\(id), \(json.readableBytes) bytes)"
        case .error(let error): "ERROR(\(error.requestID), \(error), closing \(error.closesConnection))"
        default: "\(messageType)"
        }
    }

    /// The request id this frame finally answers, if it is a final answer.
    var issue4AnsweredRequest: UInt32? {
        switch self {
        case .ok(let id), .pong(let id), .posted(let id, _, _), .state(let id, _), .queryResult(let id, _): id
        case .error(let error): error.requestID == 0 ? nil : error.requestID
        default: nil
        }
    }

    /// The notification fields of `NOTIFICATION`, `NOTIFICATION_MERGED` or `RETAINED`.
    var issue4Notification: NotificationFrame? {
        switch self {
        case .notification(let n), .notificationMerged(_, let n), .retained(_, let n): n
        default: nil
        }
    }
}

extension NotificationFrame {
    var payloadText: String { String(decoding: payload.readableBytesView, as: UTF8.self) }
}
