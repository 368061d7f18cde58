#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import FoundationEssentials
import NIOCore
import NotifyWire

/// What `status` reports besides the broker's counters: sampled off the event loop or as events happen.
struct StatusSamples {
    fileprivate var rates: [(time: NIODeadline, posts: UInt64, deliveries: UInt64)] = []
    /// Posts or deliveries happened since memory was last handed back.
    fileprivate var busySinceTrim = false
    /// This process's resident set size as last sampled (off the event loop, every second).
    var residentMemoryBytes: UInt64 = 0
    /// Reloads handled so far and why the last one failed, for `notifyctl reload` to wait on.
    fileprivate(set) var configurationReloads: UInt64 = 0
    fileprivate(set) var lastReloadError: String?
}

extension Broker {
    /// Records the counters once a second, for the per-second rates in `status`.
    ///
    /// - Returns: whether to hand freed memory back to the system now: the first second without posts or
    ///   deliveries after some, when nobody waits for the allocator (trimming takes its locks).
    func sampleRates() -> Bool {
        let previous = samples.rates.last
        samples.rates.append((.now(), statistics.posts, statistics.deliveries))
        if samples.rates.count > 6 { samples.rates.removeFirst(samples.rates.count - 6) }
        let quiet = previous.map { $0.posts == statistics.posts && $0.deliveries == statistics.deliveries } ?? false
        defer { samples.busySinceTrim = !quiet }
        return quiet && samples.busySinceTrim
    }

    /// Counts a reload once its outcome is in force (the new rules applied, or the old ones kept).
    func noteReload(error: String?) {
        samples.configurationReloads += 1
        samples.lastReloadError = error
    }

    func status() -> DaemonStatus {
        var postsPerSecond = 0.0
        var deliveriesPerSecond = 0.0
        if let first = samples.rates.first, let last = samples.rates.last, last.time > first.time {
            let seconds = Double((last.time - first.time).nanoseconds) / 1e9
            postsPerSecond = Double(last.posts - first.posts) / seconds
            deliveriesPerSecond = Double(last.deliveries - first.deliveries) / seconds
        }
        let clients = peers.values
        return DaemonStatus(
            version: NotifyServer.version, instanceID: instanceID.description, pid: daemonPID,
            uptimeSeconds: Double((NIODeadline.now() - startTime).nanoseconds) / 1e9,
            connections: clients.count, subscriptions: clients.reduce(0) { $0 + $1.subscriptionCount },
            subscribedNames: index.nameCount, patterns: index.patternCount, stateNames: store.states.count,
            retainedNames: store.retained.count, posts: statistics.posts, deliveries: statistics.deliveries,
            postsPerSecond: postsPerSecond, deliveriesPerSecond: deliveriesPerSecond, merged: statistics.merged,
            dropped: statistics.dropped, slowConsumerDisconnects: statistics.slowConsumerDisconnects,
            residentMemoryBytes: samples.residentMemoryBytes,
            outboundBytes: clients.reduce(0) { $0 + $1.queue.pendingBytes },
            heldBytes: clients.reduce(0) { $0 + $1.queue.heldBytes },
            configurationReloads: samples.configurationReloads, lastReloadError: samples.lastReloadError,
            acceptFailures: statistics.acceptFailures, connectionsRefused: statistics.connectionsRefused)
    }

    /// Whether `identity` may observe `name` under the access rules.
    func mayObserve(_ name: String, _ identity: AccessControl.Identity) -> Bool {
        access.rule(for: name).map { access.mayObserve($0, identity) } ?? true
    }

    /// Names that `identity` may observe, optionally only those matching `pattern`.
    func names(matching pattern: NotificationPattern?, visibleTo identity: AccessControl.Identity) -> [DaemonName] {
        var all = Set(index.exactNames)
        all.formUnion(store.states.keys)
        all.formUnion(store.retained.keys)
        return all.filter { pattern?.matches($0.string) ?? true }
            .filter { mayObserve($0.string, identity) }
            .sorted { $0.string.utf8.lexicographicallyPrecedes($1.string.utf8) }
            .map { name in
                DaemonName(
                    name: name.string, subscribers: index.subscriberCount(of: name), state: store.states[name]?.value,
                    hasRetained: store.retained[name] != nil)
            }
    }

    /// Clients visible to `uid`: all of them for root, the user's own otherwise.
    func clients(visibleTo uid: UInt32) -> [DaemonClient] {
        let now = NIODeadline.now()
        return peers.values
            .filter { uid == 0 || $0.credentials.uid == uid }
            .sorted { $0.number < $1.number }
            .map { $0.introspection(now: now) }
    }

    /// Answers a `QUERY`: the JSON documents to send, the last in `QUERY_RESULT`, any before it in
    /// `QUERY_RESULT_PART` (only when the kind byte asks for parts: a names or clients list too long for one
    /// frame is then cut between elements).
    func query(kind rawKind: UInt8, argument: String, requester: AccessControl.Identity) -> Result<[ByteBuffer], AccessControl.Denial> {
        let takesParts = rawKind & QueryKind.partsFlag != 0
        let kind = rawKind & ~QueryKind.partsFlag
        let room = ServerFrame.maxQueryJSONLength(maxFrameLength: configuration.limits.maxFrameLength)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let parts: [ByteBuffer]
        do {
            switch QueryKind(rawValue: kind) {
            case .status:
                parts = [ByteBuffer(bytes: try encoder.encode(status()))]
            case .names:
                var pattern: NotificationPattern?
                if !argument.isEmpty {
                    do {
                        pattern = try NotificationPattern(argument)
                    } catch {
                        return .failure(AccessControl.Denial(message: error.description))
                    }
                }
                parts = try Self.arrays(of: names(matching: pattern, visibleTo: requester), encoder: encoder, room: room)
            case .clients:
                parts = try Self.arrays(of: clients(visibleTo: requester.uid), encoder: encoder, room: room)
            case nil:
                return .failure(AccessControl.Denial(message: "unknown query kind \(kind) (1 status, 2 names, 3 clients)"))
            }
        } catch {
            return .failure(AccessControl.Denial(message: "cannot encode the answer: \(error)"))
        }
        guard takesParts || parts.count == 1, parts.allSatisfy({ $0.readableBytes <= room }) else {
            let size = parts.reduce(0) { $0 + $1.readableBytes }
            return .failure(
                AccessControl.Denial(
                    message: "the answer is about \(size) bytes, more than a frame holds (\(room)); ask for it in parts "
                        + "(kind | 0x80) or narrow a names query with a pattern"))
        }
        return .success(parts)
    }

    /// `elements` as JSON arrays of at most `room` bytes each (at least one array, maybe empty).
    private static func arrays<Element: Encodable>(of elements: [Element], encoder: JSONEncoder, room: Int) throws -> [ByteBuffer] {
        var arrays: [ByteBuffer] = []
        var current = ByteBuffer(staticString: "[")
        for element in elements {
            let encoded = try encoder.encode(element)
            // One byte for the comma or the opening bracket, one for the closing bracket.
            if current.readableBytes > 1, current.readableBytes + 1 + encoded.count + 1 > room {
                current.writeStaticString("]")
                arrays.append(current)
                current = ByteBuffer(staticString: "[")
            }
            if current.readableBytes > 1 { current.writeStaticString(",") }
            current.writeBytes(encoded)
        }
        current.writeStaticString("]")
        arrays.append(current)
        return arrays
    }

    /// This process's resident set size, from `/proc/self/statm` (a file read: never on the event loop).
    static func residentMemory() -> UInt64 {
        guard let file = fopen("/proc/self/statm", "r") else { return 0 }
        defer { fclose(file) }
        var size: UInt64 = 0
        var resident: UInt64 = 0
        guard withUnsafeMutablePointer(to: &size, { sizePointer in
            withUnsafeMutablePointer(to: &resident) { residentPointer in
                withVaList([sizePointer, residentPointer]) { vfscanf(file, "%llu %llu", $0) }
            }
        }) == 2 else { return 0 }
        return resident * UInt64(sysconf(Int32(_SC_PAGESIZE)))
    }

    func snapshot() -> ServerSnapshot {
        ServerSnapshot(
            clients: peers.values.map { peer in
                ServerSnapshot.Client(
                    number: peer.number, credentials: peer.credentials, clientName: peer.clientName,
                    subscriptions: peer.subscriptionCount, pendingBytes: peer.queue.pendingBytes,
                    droppedNotifications: peer.queue.dropped, mostFramesInOneTurn: peer.mostFramesInOneTurn)
            }.sorted { $0.number < $1.number },
            names: index.nameCount, posts: statistics.posts, deliveries: statistics.deliveries,
            dropped: statistics.dropped, outboundByteLimit: configuration.outboundByteLimit,
            patternNodes: index.patternNodeCount)
    }
}
