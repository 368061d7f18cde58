import Logging
import NIOCore
import NotifyWire

/// The name-keyed subscriber table and the fan-out of posts. Lives on the server's single event loop, so it
/// needs no locks: every connection handler calls it from that loop.
final class SubscriptionRouter {
    /// The connections subscribed to one name, each once however many of its subscriptions name it.
    final class Subscribers {
        var connections: [ClientConnection] = []
    }

    let eventLoop: EventLoop
    let configuration: ServerConfiguration
    let instanceID: InstanceID
    let daemonPID: UInt32
    let logger: Logger
    private let allocator = ByteBufferAllocator()

    private var table: [String: Subscribers] = [:]
    private(set) var connections: [ObjectIdentifier: ClientConnection] = [:]
    /// Connections with bytes appended since their last flush.
    private var dirty: [ClientConnection] = []
    private var nextConnectionNumber: UInt64 = 0

    /// The sequence number of the last accepted post.
    private(set) var lastSequence: UInt64 = 0
    private(set) var statistics = ServerStatistics()

    init(eventLoop: EventLoop, configuration: ServerConfiguration, instanceID: InstanceID, daemonPID: UInt32, logger: Logger) {
        self.eventLoop = eventLoop
        self.configuration = configuration
        self.instanceID = instanceID
        self.daemonPID = daemonPID
        self.logger = logger
    }

    var nameCount: Int { table.count }

    /// The number of connections subscribed to `name` (for tests and introspection).
    func subscriberCount(of name: String) -> Int { table[name]?.connections.count ?? 0 }

    // MARK: Connections

    func register(_ connection: ClientConnection) -> UInt64 {
        nextConnectionNumber += 1
        connections[ObjectIdentifier(connection)] = connection
        statistics.connectionsAccepted += 1
        return nextConnectionNumber
    }

    func unregister(_ connection: ClientConnection) {
        for name in connection.subscribedNames.keys { removeSubscriber(connection, from: name) }
        connections.removeValue(forKey: ObjectIdentifier(connection))
    }

    // MARK: Subscriptions

    /// Adds `connection` to the subscribers of `name` (a connection is listed once per name).
    func addSubscriber(_ connection: ClientConnection, to name: String) {
        if let subscribers = table[name] {
            subscribers.connections.append(connection)
        } else {
            let subscribers = Subscribers()
            subscribers.connections.append(connection)
            table[name] = subscribers
        }
    }

    func removeSubscriber(_ connection: ClientConnection, from name: String) {
        guard let subscribers = table[name] else { return }
        if let index = subscribers.connections.firstIndex(where: { $0 === connection }) {
            subscribers.connections.swapAt(index, subscribers.connections.count - 1)
            subscribers.connections.removeLast()
        }
        if subscribers.connections.isEmpty { table.removeValue(forKey: name) }
    }

    /// Whether `name` has subscribers, which also proves it passed the name grammar when it was subscribed.
    func hasSubscribers(_ name: String) -> Bool { table[name] != nil }

    // MARK: Posting

    /// Assigns the next sequence number and queues one shared encoding of the notification to every
    /// subscriber of `name`.
    ///
    /// - Returns: the sequence number and the number of connections it was queued to.
    func post(name: String, payload: ByteBuffer, sender: SenderCredentials) -> (sequence: UInt64, delivered: UInt32) {
        lastSequence &+= 1
        statistics.posts += 1
        guard let subscribers = table[name] else { return (lastSequence, 0) }

        var frame = allocator.buffer(
            capacity: NotificationFrame.encodedLength(
                nameByteCount: name.utf8.count, payloadByteCount: payload.readableBytes))
        NotificationFrame.encode(sequence: lastSequence, sender: sender, name: name, payload: payload, into: &frame)

        var delivered: UInt32 = 0
        for connection in subscribers.connections {
            if connection.enqueueNotification(frame) {
                delivered += 1
            }
        }
        statistics.deliveries += UInt64(delivered)
        statistics.dropped += UInt64(subscribers.connections.count) - UInt64(delivered)
        return (lastSequence, delivered)
    }

    // MARK: Flushing

    /// Called by a connection the first time bytes are appended to it since its last flush.
    func markDirty(_ connection: ClientConnection) {
        dirty.append(connection)
    }

    /// Hands every touched connection's bytes to its channel: one write and flush per connection per burst.
    func flushDirtyConnections() {
        guard !dirty.isEmpty else { return }
        // A flush may close a connection synchronously (and so touch `dirty`): iterate a swapped-out list,
        // then hand its storage back so steady-state flushing allocates nothing here.
        var touched: [ClientConnection] = []
        swap(&touched, &dirty)
        for connection in touched {
            connection.flushOutbound()
        }
        touched.removeAll(keepingCapacity: true)
        if dirty.isEmpty { dirty = touched }
    }
}

/// Counters kept by the router, for logs and (later) introspection.
struct ServerStatistics: Sendable {
    var connectionsAccepted: UInt64 = 0
    var posts: UInt64 = 0
    var deliveries: UInt64 = 0
    var dropped: UInt64 = 0
}
