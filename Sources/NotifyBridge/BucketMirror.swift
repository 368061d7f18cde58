import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Notify
import NotifyNATS
import NotifyWire

/// What a key of the bucket holds, once read.
enum MirroredValue: Sendable {
    case state(UInt64)
    case retained(payload: ByteBuffer, origin: NotificationOrigin)
}

/// Mirrors state values and retained notifications through a JetStream key-value bucket (`--kv-bucket`), so that
/// every host holds the fleet's current ones, a host that starts later included.
///
/// Exported names: each value set and each retained post made locally is put under ``BucketKey`` (a state as
/// decimal text, a retained notification as its payload; the origin in the `Notifyd-Origin-*` headers), one put at a
/// time so the bucket's order is the local one. Imported names: the bucket's entries are applied locally, first
/// every current one (so the bucket decides what a starting host holds), then each change. What the bridge sets or
/// posts itself is not sent back to it (`HELLO`'s no-echo), so nothing loops; ``MirrorLedger`` keeps hosts that set
/// one name at once converging on the bucket's last value.
final class BucketMirror: Sendable {
    /// One put, in the order it was made.
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
    }

    /// A retained notification's post: where it was first made and its sequence number there.
    struct PostIdentity: Hashable, Sendable {
        var host: String
        var sequence: UInt64
    }

    private let bridge: Bridge
    let bucket: String
    private let ledger = NIOLockedValueBox(MirrorLedger<MirroredValue>())
    /// The post each imported name's local retained notification came from: an entry for the same post is not
    /// posted again.
    private let localRetained = NIOLockedValueBox<[String: PostIdentity]>([:])
    private let puts: AsyncStream<Put>
    private let putQueue: AsyncStream<Put>.Continuation
    private let observations = NIOLockedValueBox<[Observation]>([])
    /// Puts waiting while the bucket is unreachable, at most: beyond, they are dropped and counted.
    static let maxWaitingPuts = 65_536

    init(bridge: Bridge, bucket: String) {
        self.bridge = bridge
        self.bucket = bucket
        (puts, putQueue) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(Self.maxWaitingPuts))
    }

    private var counters: BridgeCounters { bridge.counters }
    private var logger: Logger { bridge.logger }

    private func isImported(_ name: String) -> Bool {
        bridge.importPatterns.contains { $0.matches(name) }
    }

    private func enqueue(_ put: Put) {
        if case .dropped = putQueue.yield(put) { counters.bump(.bucketPutFailed) }
    }

    /// Opens the bucket (creating it if needed), applies its entries, then starts exporting; runs until the task is
    /// cancelled.
    func run() async {
        guard let kv = await openBucket() else { return }
        await withTaskGroup(of: Void.self) { group in
            if !bridge.importPatterns.isEmpty {
                for notification in await currentRetained(matching: bridge.importPatterns) {
                    let origin = notification.origin
                    localRetained.withLockedValue {
                        $0[notification.name] = PostIdentity(
                            host: origin?.host ?? bridge.hostID, sequence: origin?.sequence ?? notification.sequence)
                    }
                }
                let initialValuesDone = AsyncStream<Void>.makeStream()
                group.addTask { await self.importEntries(from: kv, initialValuesDone: initialValuesDone.continuation) }
                for await _ in initialValuesDone.stream { break }
                logger.info("applied the current entries of the key-value bucket \(bucket)")
            }
            group.addTask { await self.putValues(into: kv) }
            startExportingStates()
            // Retained notifications posted here while no bridge ran (relayed ones came from elsewhere).
            for notification in await currentRetained(matching: bridge.exportPatterns) where notification.origin == nil {
                enqueue(
                    Put(
                        name: notification.name, kind: .retained,
                        bytes: notification.withPayloadBytes { ByteBuffer(bytes: $0) },
                        origin: origin(of: notification), onlyIfAbsent: isImported(notification.name),
                        skipIfSamePost: true))
            }
            await group.waitForAll()
        }
        for observation in observations.withLockedValue({ $0 }) { observation.cancel() }
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

    private func origin(of notification: ReceivedNotification) -> Origin {
        Origin(
            host: bridge.hostID, uid: notification.sender.uid, gid: notification.sender.gid,
            pid: notification.sender.pid, sequence: notification.sequence, instance: bridge.instance)
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
                    await importEntry(entry)
                }
            }
        } catch {
            if !Task.isCancelled { logger.error("the watch of the key-value bucket \(bucket) ended: \(error)") }
        }
    }

    private func importEntry(_ entry: NATSKeyValueEntry) async {
        guard entry.operation == .put else { return }
        guard let (kind, name) = BucketKey.parse(entry.key) else {
            counters.bump(.bucketInvalid)
            return
        }
        guard isImported(name) else { return }
        let value: MirroredValue
        switch kind {
        case .state:
            guard let number = UInt64(String(buffer: entry.value)) else {
                counters.bump(.bucketInvalid)
                return
            }
            value = .state(number)
        case .retained:
            // From a plain NATS client, without origin headers: remote all the same.
            let source = Origin(headers: entry.headers)
                ?? Origin(host: Origin.plainNATSHost, uid: .max, gid: .max, pid: 0, sequence: 0)
            guard (1...RelayOrigin.maxHostLength).contains(source.host.utf8.count) else {
                counters.bump(.bucketInvalid)
                return
            }
            value = .retained(
                payload: entry.value,
                origin: NotificationOrigin(
                    host: source.host, uid: source.uid, gid: source.gid, pid: source.pid, sequence: source.sequence))
        }
        guard ledger.withLockedValue({ $0.received(entry.key, revision: entry.revision, value: value) }) else { return }
        await apply(value, to: name)
    }

    private func apply(_ value: MirroredValue, to name: String) async {
        switch value {
        case .state(let number):
            do {
                try await bridge.center.setState(number, for: name)
                counters.bump(.stateImported)
            } catch {
                counters.bump(.stateRefused)
                logger.warning("the daemon refused the imported state of \(name): \(error)")
            }
        case .retained(let payload, let origin):
            let post = PostIdentity(host: origin.host, sequence: origin.sequence)
            guard localRetained.withLockedValue({ $0[name] }) != post else { return }
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

    /// A retained notification imported over NATS (`Notifyd-Retained`) now stands locally: an entry for the same
    /// post is not posted again.
    func noteImportedRetained(_ name: String, origin: NotificationOrigin) {
        localRetained.withLockedValue { $0[name] = PostIdentity(host: origin.host, sequence: origin.sequence) }
    }

    // MARK: Local daemon to bucket

    /// A retained post made here, to be put into the bucket (instead of being published on its subject, so that
    /// every host sees retained posts in the bucket's order).
    func exportRetained(_ notification: ReceivedNotification) {
        enqueue(
            Put(
                name: notification.name, kind: .retained,
                bytes: notification.withPayloadBytes { ByteBuffer(bytes: $0) }, origin: origin(of: notification)))
    }

    private func startExportingStates() {
        let patterns = bridge.exportPatterns
        for (index, pattern) in patterns.enumerated() {
            let earlier = Array(patterns[..<index])
            do {
                let observation = try bridge.center.observeStates(pattern.text, sendingCurrent: true, on: .immediate) {
                    [self] change in
                    if earlier.contains(where: { $0.matches(change.name) }) { return }
                    let sender = change.sender
                    enqueue(
                        Put(
                            name: change.name, kind: .state, bytes: ByteBuffer(string: String(change.value)),
                            origin: Origin(
                                host: bridge.hostID, uid: sender?.uid ?? 0, gid: sender?.gid ?? 0,
                                pid: sender?.pid ?? 0, sequence: 0, instance: bridge.instance),
                            onlyIfAbsent: change.isCurrent && isImported(change.name)))
                }
                observations.withLockedValue { $0.append(observation) }
            } catch {
                logger.error("cannot watch the state values of \(pattern.text): \(error)")
            }
        }
    }

    private func putValues(into kv: NATSKeyValue) async {
        for await put in puts {
            let key = BucketKey.key(put.kind, name: put.name)
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
                counters.bump(put.kind == .state ? .stateExported : .retainedExported)
            } catch {
                if !put.onlyIfAbsent {
                    counters.bump(.bucketPutFailed)
                    logger.warning("cannot put \(key) into \(bucket): \(error)")
                }
            }
            if let newer = ledger.withLockedValue({ $0.didPut(key, revision: revision) }), isImported(put.name) {
                await apply(newer, to: put.name)
            }
        }
    }
}
