import NIOCore

/// Everything a ``NATSClient`` knows, kept under its lock: the connection phase, the outbox, the subscriptions
/// and the server pool. Callers on any thread publish and subscribe through it; the I/O thread drains it.
struct ClientState {
    enum Phase {
        case idle
        case connecting
        case handshaking(any Channel, sentConnect: Bool)
        case ready(any Channel)
        case closed

        var isReady: Bool { if case .ready = self { true } else { false } }
        /// Whether `SUB`/`UNSUB` go to the current connection's control queue: once the handshake's own
        /// `SUB`s were written (they list the subscriptions as they were then), every later change must follow.
        var takesControl: Bool {
            switch self {
            case .ready, .handshaking(_, sentConnect: true): true
            default: false
            }
        }
        var channel: (any Channel)? {
            switch self {
            case .handshaking(let channel, _), .ready(let channel): channel
            case .idle, .connecting, .closed: nil
            }
        }
    }

    struct SubscriptionEntry {
        var subject: String
        var queueGroup: String?
        var handler: @Sendable (NATSMessage) -> Void
    }

    var phase: Phase = .idle
    var statistics = NATSClient.Statistics()
    var maxPayload = 1 << 20
    /// Encoded `PUB`/`HPUB` operations not yet handed to a connection, and how many messages they are.
    var outbox = ByteBuffer()
    var outboxMessages = 0
    /// `SUB`/`UNSUB` operations for the current connection; never dropped, discarded when the connection ends
    /// (the next connection sends every live subscription afresh).
    var control = ByteBuffer()
    var flushScheduled = false
    var subscriptions: [UInt64: SubscriptionEntry] = [:]
    var nextSID: UInt64 = 1
    var pool: [NATSServerAddress]
    /// The servers the configuration named: always in the pool; the rest is what the cluster announces now.
    let configured: [NATSServerAddress]
    var nextServer = 0
    /// The server of the current connection attempt or connection.
    var currentServer: NATSServerAddress?
    /// When the current connection became ready: one that ends soon after counts as a failed attempt.
    var readySince: NIODeadline?
    /// `close()` was called (once is enough).
    var closeStarted = false
    /// Calls that may still arm a timer on the client's event loop (see ``NATSClient/beginOperation(_:)``).
    var operationsInFlight = 0
    /// Completed when the last of them ends, for a `close()` that waits to stop the client's own thread.
    var operationsDrained: EventLoopPromise<Void>?
    var failedAttempts = 0
    var everConnected = false
    var outstandingPings = 0
    /// Promises of `flush()` calls, answered by `PONG`s in order; nil entries are keep-alive pings.
    var pingWaiters: [EventLoopPromise<Void>?] = []
    /// `flush()` calls made while not connected: their `PING`s go out after the next handshake.
    var deferredPings: [EventLoopPromise<Void>] = []
    var connectionWaiters: [EventLoopPromise<Void>] = []
    /// The request/reply inbox: its prefix (`_INBOX.<random>`), and its one wildcard subscription once made.
    let inboxPrefix = "_INBOX." + ClientState.randomToken()
    var inboxSID: UInt64?
    var nextRequestToken: UInt64 = 0
    /// Requests waiting for their reply, by the last token of their reply subject.
    var pendingRequests: [String: EventLoopPromise<NATSMessage>] = [:]
    /// Who hears of reconnections and of the close (the key-value watchers), by id.
    var lifecycleObservers: [UInt64: @Sendable (NATSClient.LifecycleEvent) -> Void] = [:]
    var nextObserverID: UInt64 = 0
    let maxPendingBytes: Int
    let user: String?
    let password: String?
    let token: String?

    init(configuration: NATSClient.Configuration) {
        pool = configuration.servers
        configured = configuration.servers
        maxPendingBytes = configuration.maxPendingBytes
        let withCredentials = configuration.servers.first { $0.user != nil || $0.token != nil }
        user = withCredentials?.user
        password = withCredentials?.password
        token = withCredentials?.token
    }

    mutating func enqueuePublish(subject: String, replyTo: String?, headers: NATSHeaders?, payload: ByteBuffer)
        -> Result<Bool, NATSClientError>
    {
        if case .closed = phase { return .failure(.closed) }
        if outbox.readableBytes >= maxPendingBytes {
            statistics.dropped += 1
            return .success(false)
        }
        let start = outbox.writerIndex
        let headerBytes = NATSClientOperation.writePublish(
            subject: subject, replyTo: replyTo, headers: headers, payload: payload, to: &outbox
        )
        // What the server counts against max_payload: the headers and the payload, not the control line.
        let size = headerBytes + payload.readableBytes
        if size > maxPayload {
            outbox.moveWriterIndex(to: start)
            return .failure(.payloadTooLarge(size: size, limit: maxPayload))
        }
        outboxMessages += 1
        return .success(true)
    }

    mutating func addSubscription(
        subject: String, queueGroup: String?, handler: @escaping @Sendable (NATSMessage) -> Void
    ) -> Result<NATSClient.Subscription, NATSClientError> {
        if case .closed = phase { return .failure(.closed) }
        let sid = nextSID
        nextSID += 1
        subscriptions[sid] = SubscriptionEntry(subject: subject, queueGroup: queueGroup, handler: handler)
        if phase.takesControl {
            NATSClientOperation.writeSubscribe(subject: subject, queueGroup: queueGroup, sid: sid, to: &control)
        }
        return .success(NATSClient.Subscription(sid: sid, subject: subject))
    }

    mutating func removeSubscription(sid: UInt64) {
        guard subscriptions.removeValue(forKey: sid) != nil else { return }
        if phase.takesControl { NATSClientOperation.writeUnsubscribe(sid: sid, to: &control) }
    }

    /// The handshake's batch: `CONNECT`, every live subscription, then a `PING` whose `PONG` ends the handshake.
    func handshake(name: String, echo: Bool) -> ByteBuffer {
        var buffer = ByteBuffer()
        let options = NATSClientOperation.ConnectOptions(
            name: name, echo: echo, user: user, pass: password, authToken: token
        )
        NATSClientOperation.writeConnect(options, to: &buffer)
        for (sid, entry) in subscriptions.sorted(by: { $0.key < $1.key }) {
            NATSClientOperation.writeSubscribe(subject: entry.subject, queueGroup: entry.queueGroup, sid: sid, to: &buffer)
        }
        NATSClientOperation.writePing(to: &buffer)
        return buffer
    }

    /// The pool becomes the configured servers, those the cluster announces now (`host:port`), then up to
    /// ``maxDepartedServers`` that it announced before (last, as a last resort during a rolling restart), without
    /// duplicates: reconnecting tries live servers first and never crawls through an ever-growing list.
    mutating func learn(connectURLs: [String]) {
        guard !connectURLs.isEmpty else { return }
        var servers = configured
        func add(_ address: NATSServerAddress) {
            if !servers.contains(where: { $0.host == address.host && $0.port == address.port }) { servers.append(address) }
        }
        for url in connectURLs {
            guard var address = try? NATSServerAddress(url: url) else { continue }
            address.user = nil
            add(address)
        }
        let live = servers.count
        for departed in pool where servers.count < live + Self.maxDepartedServers { add(departed) }
        if servers != pool {
            // Keep trying where the rotation was, within the new list.
            nextServer = nextServer % max(servers.count, 1)
            pool = servers
        }
    }

    /// 22 random characters of `[0-9A-Za-z]` (about 131 bits), as NATS clients make inbox names.
    static func randomToken(length: Int = 22) -> String {
        let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
        var generator = SystemRandomNumberGenerator()
        return String(decoding: (0..<length).map { _ in alphabet.randomElement(using: &generator)! }, as: UTF8.self)
    }

    /// How many servers the cluster no longer announces stay in the pool.
    static let maxDepartedServers = 8

    /// Forgets a waiter whose caller stopped waiting (its timeout fired).
    mutating func forget(_ promise: EventLoopPromise<Void>) {
        connectionWaiters.removeAll { $0.futureResult === promise.futureResult }
        deferredPings.removeAll { $0.futureResult === promise.futureResult }
        for index in pingWaiters.indices where pingWaiters[index]?.futureResult === promise.futureResult {
            pingWaiters[index] = nil  // the PONG still comes: keep its place in the order
        }
    }
}
