import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Notify
import NotifyNATS
import NotifyWire
import OrderedCollections

/// What a key of the bucket holds, once read.
enum MirroredValue: Sendable {
    case state(UInt64)
    case retained(payload: ByteBuffer, origin: NotificationOrigin)
}

/// Mirrors state values and retained notifications through a JetStream key-value bucket (`--kv-bucket`), so that
/// every host holds the fleet's current ones, a host that starts later included.
///
/// Exported names: each value set and each retained post made locally is put under ``BucketKey`` (a state as
/// decimal text, a retained notification as its payload; the origin in the `Notifyd-Origin-*` headers), the latest
/// per key, in the order the keys changed. Imported names: the bucket's entries are applied locally, first every
/// current one (so the bucket decides what a starting host holds), then each change, one at a time in the order
/// ``MirrorLedger`` decided them, so hosts that write one name at once converge on the bucket's last entry (a
/// bridge running behind may see only the last of a key's quick changes, which a bucket of history 1 keeps). What
/// the bridge sets or posts is not sent back to it (`HELLO`'s no-echo), so nothing loops. When the local daemon
/// restarts (its values gone) or the watch fails, the mirror starts over from the bucket's current entries; a bucket
/// deleted and created again (its revisions start over) is treated as a new one: the mirror forgets what it knew of
/// the old one and puts this host's values into it, as a bridge starting against it would.
final class BucketMirror: Sendable {
    /// One put: the latest for its key replaces any still waiting.
    struct Put: Sendable {
        var name: String
        var kind: BucketKey.Kind
        var bytes: ByteBuffer
        var origin: Origin
        /// A value the daemon held before the bridge started, for an imported name: the bucket already decided
        /// it, so it is put only where the bucket has none.
        var onlyIfAbsent = false
        /// A retained notification the daemon held before the bridge started: not put again when the bucket holds
        /// that very post.
        var skipIfSamePost = false

        /// Keeps what `other`, a put of the same key it replaces or meets, asked: a plain put (not only if absent),
        /// and a put even of the post the bucket holds. So a change made here stays a change whichever came first.
        mutating func keepAsked(by other: Put) {
            onlyIfAbsent = onlyIfAbsent && other.onlyIfAbsent
            skipIfSamePost = skipIfSamePost && other.skipIfSamePost
        }
    }

    /// A retained notification's post: where it was first made and its sequence number there (for an entry a
    /// plain NATS client put, the entry's revision).
    struct PostIdentity: Hashable, Sendable {
        var host: String
        var sequence: UInt64

        init(host: String, sequence: UInt64) {
            self.host = host
            self.sequence = sequence
        }

        init(_ origin: NotificationOrigin) { self.init(host: origin.host, sequence: origin.sequence) }
    }

    private let bridge: Bridge
    let bucket: String
    /// The mirror's own connection for state values, set and watched: a flood of changes that gets it closed as a
    /// slow consumer (changes are never held) leaves the bridge's exports alone, and it reconnects by itself.
    let states: NotifyCenter
    private let ledger = NIOLockedValueBox(MirrorLedger<MirroredValue>())
    /// The post each imported name's local retained notification came from: an entry for the same post is not
    /// posted again.
    private let localRetained = NIOLockedValueBox<[String: PostIdentity]>([:])
    /// What the bucket is known to hold per key of an exported name (acknowledged puts, entries seen): putting the
    /// same again is skipped. Only keys this bridge may put, copied out of the read buffer, and forgotten when the
    /// bucket deletes them: the fleet's other keys cost nothing here.
    private let bucketValues = NIOLockedValueBox<[String: ByteBuffer]>([:])
    /// Puts waiting: the latest per key, keys in the order they first waited. Bounded by the number of names.
    private let waiting = NIOLockedValueBox(OrderedDictionary<String, Put>())
    private let wake = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    /// Entries to apply locally, the latest per bucket key (a name's state and its retained notification are two
    /// keys), keys in the order the ledger first let them through: while the local daemon is away it holds one per
    /// key, not every change the fleet makes meanwhile.
    private let applies = CoalescingQueue<(name: String, value: MirroredValue)>()
    /// Restarts of the local daemon asked for (``restart()``), and the wake-up of the session under way. A stream
    /// of each session's own: a stream whose waiting reader is cancelled (a session ending for another reason)
    /// ends for good.
    private let restartRequests = NIOLockedValueBox<(count: UInt64, wake: AsyncStream<Void>.Continuation?)>((0, nil))
    /// While a session after a restart of the daemon reads the current entries: this process's own apply too.
    private let restoringOwn = NIOLockedValueBox(false)
    private let observations = NIOLockedValueBox<[Observation]>([])
    private let putTask = NIOLockedValueBox<Task<Void, Never>?>(nil)

    init(bridge: Bridge, bucket: String, configuration: NotifyCenter.Configuration) {
        self.bridge = bridge
        self.bucket = bucket
        states = NotifyCenter(configuration: configuration)
    }

    private var counters: BridgeCounters { bridge.counters }
    private var logger: Logger { bridge.logger }

    private func isImported(_ name: String) -> Bool {
        bridge.importPatterns.contains { $0.matches(name) }
    }

    private func isExported(_ name: String) -> Bool {
        bridge.exportPatterns.contains { $0.matches(name) }
    }

    private func enqueue(_ put: Put) {
        waiting.withLockedValue { Self.wait(put, under: BucketKey.key(put.kind, name: put.name), in: &$0) }
        wake.continuation.yield()
    }

    /// Makes `put` the key's waiting put, keeping what a waiting one asked: a change made here must not become a
    /// put only if absent because a current value (a re-seed, ``startExportingStates()``) came after it, or the
    /// bucket's older value would win.
    static func wait(_ put: Put, under key: String, in waiting: inout OrderedDictionary<String, Put>) {
        var put = put
        if let earlier = waiting[key] { put.keepAsked(by: earlier) }
        waiting[key] = put
    }

    /// Puts `put`, which failed, back to be tried again, unless a newer put of its key waits: that one then keeps
    /// what this one asked, as in ``wait(_:under:in:)``.
    static func retry(_ put: Put, under key: String, in waiting: inout OrderedDictionary<String, Put>) {
        guard var newer = waiting[key] else {
            waiting[key] = put
            return
        }
        newer.keepAsked(by: put)
        waiting[key] = newer
    }

    /// The local daemon restarted (its state values and retained notifications are gone): start over from the
    /// bucket's current entries.
    func restart() {
        restartRequests.withLockedValue { requests in
            requests.count += 1
            requests.wake?.yield()
        }
    }

    /// Opens the bucket (creating it if needed), applies its entries, then starts exporting; runs until the task is
    /// cancelled, starting over after a failed watch or a restart of the local daemon.
    func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.applyEntries() }
            var exporting = false
            // The restarts of the daemon the sessions so far started over for.
            var restartsHandled: UInt64 = 0
            var delay = Duration.milliseconds(100)
            // When the stream of the bucket last opened was created.
            var openedStream: String?
            while !Task.isCancelled {
                guard let kv = await openBucket() else { break }
                let replaced = openedStream != nil && kv.streamCreated != nil && kv.streamCreated != openedStream
                openedStream = kv.streamCreated ?? openedStream
                if replaced {
                    counters.bump(.bucketReplaced)
                    logger.warning(
                        "the key-value bucket \(bucket) was deleted and created again: starting over from its entries and putting this host's values into it")
                }
                let (forRestart, handled) = await session(
                    kv, startExporting: !exporting, restartsHandled: restartsHandled, bucketReplaced: replaced)
                exporting = true
                restartsHandled = handled
                if Task.isCancelled { break }
                if forRestart { delay = .milliseconds(100) } else {
                    counters.bump(.bucketWatchRestarts)
                    try? await Task.sleep(for: delay)
                    delay = min(delay * 2, .seconds(5))
                }
            }
            group.cancelAll()
        }
        putTask.withLockedValue { $0?.cancel() }
        for observation in observations.withLockedValue({ $0 }) { observation.cancel() }
        await states.close()
    }

    /// Applies the bucket's entries until the watch ends or a restart is asked for.
    ///
    /// - Parameter bucketReplaced: the bucket is not the one opened last (deleted and created again): its revisions
    ///   start over, and it holds none of the old one's entries.
    /// - Parameter restartsHandled: the restarts of the daemon that earlier sessions started over for; one asked
    ///   for since makes this session start over (``restart()``).
    /// - Returns: whether it ended for a restart of the daemon (rather than a failure of the watch), and the
    ///   restarts handled: those it started over for once it has read the bucket's current entries, else still
    ///   `restartsHandled` (the next session restores again).
    private func session(
        _ kv: NATSKeyValue, startExporting: Bool, restartsHandled: UInt64, bucketReplaced: Bool
    ) async -> (forRestart: Bool, restartsHandled: UInt64) {
        let restartWake = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let restartsAsked = restartRequests.withLockedValue { requests in
            requests.wake = restartWake.continuation
            return requests.count
        }
        defer {
            restartRequests.withLockedValue { $0.wake = nil }
            restartWake.continuation.finish()
        }
        let afterRestart = restartsAsked != restartsHandled
        if afterRestart {
            // The daemon lost everything: every entry applies again, this host's own last puts included.
            ledger.withLockedValue { $0 = MirrorLedger() }
        } else if bucketReplaced {
            // A new bucket's revisions are not comparable with the old one's.
            ledger.withLockedValue { $0.forgetRevisions() }
        }
        if bucketReplaced { bucketValues.withLockedValue { $0 = [:] } }
        restoringOwn.withLockedValue { $0 = afterRestart }
        // A restart is handled once the bucket's current entries were all read (the watch can fail before).
        var currentEntriesRead = bridge.importPatterns.isEmpty
        let forRestart = await withTaskGroup(of: Bool.self) { group in
            let initialValuesDone = AsyncStream<Void>.makeStream()
            if !bridge.importPatterns.isEmpty {
                var held: [String: PostIdentity] = [:]
                for notification in await currentRetained(matching: bridge.importPatterns) {
                    let origin = notification.origin
                    held[notification.name] = PostIdentity(
                        host: origin?.host ?? bridge.hostID, sequence: origin?.sequence ?? notification.sequence)
                }
                localRetained.withLockedValue { $0 = held }
                group.addTask {
                    await self.importEntries(from: kv, initialValuesDone: initialValuesDone.continuation)
                    return false
                }
                for await _ in initialValuesDone.stream {
                    currentEntriesRead = true
                    break
                }
                restoringOwn.withLockedValue { $0 = false }
                if currentEntriesRead { logger.info("applied the current entries of the key-value bucket \(bucket)") }
            } else {
                // No watch to end when the bucket is deleted (and perhaps created again): asked instead.
                group.addTask {
                    await self.waitUntilGone(kv)
                    return false
                }
            }
            if startExporting {
                // Only now: a put made before the bucket's entries were applied could lose to them locally and
                // win in the bucket.
                putTask.withLockedValue { $0 = Task { await self.putValues(into: kv) } }
            }
            if startExporting || bucketReplaced {
                // What this host holds, put as a bridge starting now would put it.
                startExportingStates()
                await putLocalRetained()
            }
            group.addTask {
                for await _ in restartWake.stream { return true }
                return false
            }
            let outcome = await group.next() ?? false
            group.cancelAll()
            return outcome
        }
        return (forRestart, currentEntriesRead ? restartsAsked : restartsHandled)
    }

    /// How often a bridge that imports nothing asks whether the bucket is still the one it opened.
    static let bucketCheckInterval = Duration.seconds(5)

    /// Returns once `kv`'s stream is gone or replaced (or the task is cancelled).
    private func waitUntilGone(_ kv: NATSKeyValue) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: Self.bucketCheckInterval)
            if Task.isCancelled { return }
            // NATS unreachable says nothing about the bucket: asked again later (not queued meanwhile).
            guard bridge.nats.isConnected else { continue }
            if (try? await kv.isStreamOpened()) == false {
                logger.warning("the key-value bucket \(bucket) is gone or was created again: opening it again")
                return
            }
        }
    }

    private func openBucket() async -> NATSKeyValue? {
        var delay = Duration.milliseconds(100)
        var said = false
        while !Task.isCancelled {
            do {
                let kv = try await bridge.nats.keyValue(bucket: bucket, createIfMissing: true)
                logger.info("mirroring state values and retained notifications through the key-value bucket \(bucket)")
                return kv
            } catch {
                if !said { logger.warning("the key-value bucket \(bucket) is not available yet: \(error)") }
                said = true
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
        }
        return nil
    }

    /// The retained notifications the local daemon holds for `patterns` now.
    private func currentRetained(matching patterns: [NotificationPattern]) async -> [ReceivedNotification] {
        let received = NIOLockedValueBox<[ReceivedNotification]>([])
        var observations: [Observation] = []
        for pattern in patterns {
            let observation = try? bridge.center.observe(
                pattern.text, on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
            ) { notification in
                if notification.isRetained { received.withLockedValue { $0.append(notification) } }
            }
            if let observation { observations.append(observation) }
        }
        // Current values come before the subscription's answer, and a round trip comes after that.
        try? await bridge.center.synchronize()
        for observation in observations { observation.cancel() }
        var seen = Set<String>()
        return received.withLockedValue { $0 }.filter { seen.insert($0.name).inserted }
    }

    // MARK: Bucket to local daemon

    private func importEntries(from kv: NATSKeyValue, initialValuesDone: AsyncStream<Void>.Continuation) async {
        defer { initialValuesDone.finish() }
        do {
            for try await event in try await kv.watch() {
                switch event {
                case .initialValuesDone:
                    initialValuesDone.yield()
                case .entry(let entry):
                    importEntry(entry)
                }
            }
        } catch {
            if !Task.isCancelled { logger.error("the watch of the key-value bucket \(bucket) ended: \(error)") }
        }
    }

    private func importEntry(_ entry: NATSKeyValueEntry) {
        counters.bump(.bucketEntries)
        guard entry.operation == .put else {
            bucketValues.withLockedValue { $0[entry.key] = nil }
            return
        }
        guard let (kind, name) = BucketKey.parse(entry.key), !name.hasPrefix("self.") else {
            counters.bump(.bucketInvalid)
            return
        }
        if isExported(name) {
            bucketValues.withLockedValue { $0[entry.key] = ByteBuffer(bytes: entry.value.readableBytesView) }
        }
        guard isImported(name) else { return }
        let origin = Origin(headers: entry.headers)
        // This process's own put, stored even if its acknowledgement was lost: the local value is at least as new.
        if let origin, origin.host == bridge.hostID, origin.instance == bridge.instance,
            !restoringOwn.withLockedValue({ $0 })
        {
            return
        }
        let value: MirroredValue
        switch kind {
        case .state:
            guard let number = UInt64(String(buffer: entry.value)) else {
                counters.bump(.bucketInvalid)
                return
            }
            value = .state(number)
        case .retained:
            // From a plain NATS client, without origin headers: remote all the same, one post per revision.
            var source = origin ?? .plainNATS
            guard source.hasValidHost else {
                counters.bump(.bucketInvalid)
                return
            }
            if source.sequence == 0 { source.sequence = entry.revision }
            value = .retained(payload: entry.value, origin: source.notificationOrigin)
        }
        // Decided and queued under one lock: for each key, what is applied is the last value the ledger let through.
        ledger.withLockedValue { ledger in
            if ledger.received(entry.key, revision: entry.revision, value: value) {
                applies.put((name, value), for: entry.key)
            }
        }
    }

    private func applyEntries() async {
        while let (_, (name, value)) = await applies.next() {
            switch value {
            case .state(let number):
                do {
                    try await states.setState(number, for: name)
                    counters.bump(.stateImported)
                } catch NotifyError.rejected(_, let message) {
                    counters.bump(.stateRefused)
                    logger.warning("the daemon refused the imported state of \(name): \(message)")
                } catch {
                    // Unreachable: applied again from the bucket when the daemon is back (a restart starts over).
                    counters.bump(.importLost)
                    logger.warning("cannot set the imported state of \(name): \(error)")
                }
            case .retained(let payload, let origin):
                let post = PostIdentity(origin)
                guard localRetained.withLockedValue({ $0[name] }) != post else { continue }
                do {
                    // A refusal by the daemon comes back as a rejected post, counted as import_refused.
                    try bridge.center.post(name, payload: payload.readableBytesView, retain: true, origin: origin)
                    localRetained.withLockedValue { $0[name] = post }
                    counters.bump(.retainedImported)
                } catch NotifyError.payloadTooLarge {
                    counters.bump(.importTooLarge)
                } catch {
                    counters.bump(.importLost)
                    logger.error("cannot import the retained \(name): \(error)")
                }
            }
        }
    }

    /// A retained notification imported over NATS (`Notifyd-Retained`) now stands locally: an entry for the same
    /// post is not posted again.
    func noteImportedRetained(_ name: String, origin: NotificationOrigin) {
        localRetained.withLockedValue { $0[name] = PostIdentity(origin) }
    }

    // MARK: Local daemon to bucket

    /// A retained post made here, to be put into the bucket (instead of being published on its subject, so that
    /// every host sees retained posts in the bucket's order).
    func exportRetained(_ notification: ReceivedNotification) {
        enqueue(
            Put(
                name: notification.name, kind: .retained,
                bytes: notification.withPayloadBytes { ByteBuffer(bytes: $0) }, origin: bridge.origin(of: notification)))
    }

    /// The retained notifications posted on this host (relayed ones came from elsewhere), for the bucket.
    private func putLocalRetained() async {
        for notification in await currentRetained(matching: bridge.exportPatterns) where notification.origin == nil {
            enqueue(
                Put(
                    name: notification.name, kind: .retained,
                    bytes: notification.withPayloadBytes { ByteBuffer(bytes: $0) },
                    origin: bridge.origin(of: notification), onlyIfAbsent: isImported(notification.name),
                    skipIfSamePost: true))
        }
    }

    /// Observes the exported names' state values, each one set locally to be put into the bucket; the current ones
    /// first. Started again for a replaced bucket (the observations before are cancelled), so that it gets them all.
    private func startExportingStates() {
        // Cancelled only once the new ones observe: a value set in between reaches one of them.
        let earlierObservations = observations.withLockedValue { observations in
            defer { observations = [] }
            return observations
        }
        defer { for observation in earlierObservations { observation.cancel() } }
        let patterns = bridge.exportPatterns
        for (index, pattern) in patterns.enumerated() {
            let earlier = Array(patterns[..<index])
            do {
                let observation = try states.observeStates(pattern.text, sendingCurrent: true, on: .immediate) {
                    [self] change in
                    if earlier.contains(where: { $0.matches(change.name) }) { return }
                    // A current value has no known setter.
                    let sender = change.sender
                    enqueue(
                        Put(
                            name: change.name, kind: .state, bytes: ByteBuffer(string: String(change.value)),
                            origin: Origin(
                                host: bridge.hostID, uid: sender?.uid ?? .max, gid: sender?.gid ?? .max,
                                pid: sender?.pid ?? 0, sequence: 0, instance: bridge.instance),
                            onlyIfAbsent: change.isCurrent && isImported(change.name)))
                }
                observations.withLockedValue { $0.append(observation) }
            } catch {
                logger.error("cannot watch the state values of \(pattern.text): \(error)")
            }
        }
    }

    /// Whether a failed put may succeed later: not when the bucket or the server refused it.
    private static func isTransient(_ error: any Error) -> Bool {
        switch error {
        case is NATSJetStreamAPIError, is NATSKeyValueError, NATSClientError.payloadTooLarge: false
        default: true
        }
    }

    private func putValues(into kv: NATSKeyValue) async {
        while !Task.isCancelled {
            guard let (key, put) = waiting.withLockedValue({ $0.isEmpty ? nil : $0.removeFirst() }) else {
                for await _ in wake.stream { break }
                continue
            }
            if bucketValues.withLockedValue({ $0[key] }) == put.bytes, put.kind == .state || put.skipIfSamePost {
                continue
            }
            if put.skipIfSamePost, let held = try? await kv.get(key), let origin = Origin(headers: held.headers),
                origin.host == put.origin.host, origin.sequence == put.origin.sequence
            {
                continue
            }
            ledger.withLockedValue { $0.willPut(key) }
            var revision: UInt64?
            do {
                var headers = put.origin.headers
                // JetStream refuses the put when the key has a value already (the expected last sequence).
                if put.onlyIfAbsent { headers.append("Nats-Expected-Last-Subject-Sequence", "0") }
                revision = try await kv.put(key, value: put.bytes, headers: headers)
                bucketValues.withLockedValue { $0[key] = put.bytes }
                counters.bump(put.kind == .state ? .stateExported : .retainedExported)
            } catch {
                if !put.onlyIfAbsent {
                    counters.bump(.bucketPutFailed)
                    logger.warning("cannot put \(key) into \(bucket): \(error)")
                    if Self.isTransient(error) {
                        // NATS or JetStream unreachable: tried again unless a newer value for the key waits.
                        waiting.withLockedValue { Self.retry(put, under: key, in: &$0) }
                        try? await Task.sleep(for: .milliseconds(500))
                    }
                }
            }
            ledger.withLockedValue { ledger in
                if let newer = ledger.didPut(key, revision: revision), isImported(put.name) {
                    applies.put((put.name, newer), for: key)
                }
            }
        }
    }
}
