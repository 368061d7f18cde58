import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Notify
import NotifyNATS
import NotifyWire

/// Carries notifications between the local daemon and NATS: `export` patterns out, `import` patterns in.
///
/// Loops cannot form, however the patterns overlap across hosts: the bridge never exports a notification it
/// posted itself (the daemon does not send it back: `HELLO`'s no-echo flag; and its sender pid would be the
/// bridge's), NATS never sends the bridge its own messages (`echo` off), and a message whose origin host is this
/// one is never imported.
package final class Bridge: Sendable {
    package let configuration: BridgeConfiguration
    package let hostID: String
    let mapping: SubjectMapping
    let center: NotifyCenter
    let nats: NATSClient
    let counters = BridgeCounters()
    let observations = NIOLockedValueBox<[Observation]>([])
    let eventTasks = NIOLockedValueBox<[Task<Void, Never>]>([])
    let metricsChannels = NIOLockedValueBox<[any Channel]>([])
    let logger: Logger
    /// The last `Notifyd-Bridge-Seq` seen from each other bridge (by host id).
    let lastSequence = NIOLockedValueBox<[String: UInt64]>([:])
    /// This process's random id in `Notifyd-Bridge-Instance`: tells another bridge with the same host id apart.
    let instance = String(UInt64.random(in: 1...UInt64.max), radix: 36)
    private let warnedHostIDClash = NIOLockedValueBox(false)

    /// The `--export` and `--import` patterns, in the order given (the first that matches carries).
    let exportPatterns: [NotificationPattern]
    let importPatterns: [NotificationPattern]
    /// Mirrors state values and retained notifications through the `--kv-bucket`, when there is one.
    var mirror: BucketMirror? { mirrorBox.withLockedValue { $0 } }
    /// Set once the bridge exists (the mirror refers to it), emptied at ``close()``.
    private let mirrorBox = NIOLockedValueBox<BucketMirror?>(nil)
    /// Patterns (local) and subjects (NATS) whose subscription was refused: they carry nothing.
    let refusedPatterns = NIOLockedValueBox<Set<String>>([])

    /// Whether a pattern listed before this one, and not refused, already carries what `matches` accepts: overlapping
    /// patterns (`>` and `org.>`) each receive it, and only the first one carries it.
    private func carriedEarlier<Pattern>(
        by earlier: [Pattern], text: (Pattern) -> String, _ matches: (Pattern) -> Bool
    ) -> Bool {
        earlier.contains { pattern in
            matches(pattern) && !refusedPatterns.withLockedValue { $0.contains(text(pattern)) }
        }
    }

    private func warnHostIDClashOnce() {
        guard warnedHostIDClash.withLockedValue({ warned in defer { warned = true }; return !warned }) else { return }
        logger.error(
            "another notifyd-bridge publishes as host id \(hostID): its messages are not imported; give each host its own --host-id")
    }

    /// Creates the bridge and starts connecting both sides; nothing is carried before ``start()``.
    package init(configuration: BridgeConfiguration, hostID: String, logger: Logger) throws {
        try configuration.validate()
        self.configuration = configuration
        self.hostID = hostID
        self.logger = logger
        mapping = try SubjectMapping(prefix: configuration.subjectPrefix)
        exportPatterns = try configuration.exports.map { try NotificationPattern($0) }
        importPatterns = try configuration.imports.map { try NotificationPattern($0) }
        var local = NotifyCenter.Configuration(
            socketPath: configuration.socketPath, clientName: "notifyd-bridge", logger: logger,
            whileDisconnected: .wait(timeout: 10))
        // The daemon keeps what the bridge imports from its exports; the sender check in export() is for a
        // daemon older than that.
        local.receivesOwnPosts = false
        center = NotifyCenter(configuration: local)
        // One I/O thread for both sides: an export goes from the daemon's socket to NATS's, and an import the other
        // way, without a hand-over between threads.
        nats = NATSClient(
            configuration: .init(
                servers: try configuration.natsURLs.map { try NATSServerAddress(url: $0) },
                name: "notifyd-bridge \(hostID)", echo: false, maxPendingBytes: configuration.maxPendingBytes),
            eventLoopGroup: center.eventLoop, logger: logger)
        if let bucket = configuration.kvBucket {
            mirrorBox.withLockedValue { $0 = BucketMirror(bridge: self, bucket: bucket, configuration: local) }
        }
    }

    /// Subscribes on both sides and starts carrying.
    package func start() throws {
        let events = center.connectionEvents()
        let eventTask = Task { [counters, logger, mirror] in
            for await event in events {
                switch event {
                case .requestRejected(operation: "post", let error):
                    counters.bump(.importRefused)
                    logger.warning("the daemon refused an imported post: \(error)")
                case .postsExpired(let count):
                    counters.bump(.importLost, by: UInt64(count))
                case .notificationsDropped(let count, _):
                    counters.bump(.exportDroppedByDaemon, by: count)
                case .connected(daemonRestarted: true, _):
                    // Its state values and retained notifications are gone: the bucket's are applied again.
                    mirror?.restart()
                case .requestRejected(let operation, let error) where operation.hasPrefix("subscribe to "):
                    // An export pattern the daemon refused: it no longer shadows the later patterns it overlaps.
                    let pattern = String(operation.dropFirst("subscribe to ".count))
                    refusedPatterns.withLockedValue { _ = $0.insert(pattern) }
                    logger.error("the daemon refused the export \(pattern): \(error)")
                default:
                    break
                }
            }
        }
        eventTasks.withLockedValue { $0.append(eventTask) }
        let natsEvents = nats.events
        let natsTask = Task { [refusedPatterns, logger] in
            for await event in natsEvents {
                // NATS refuses a subscription it does not permit with -ERR and keeps the connection: that import
                // pattern no longer shadows the later ones it overlaps.
                guard case .serverError(let text) = event, text.hasPrefix("Permissions Violation for Subscription to ")
                else { continue }
                let subject = text.dropFirst("Permissions Violation for Subscription to ".count)
                    .trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
                refusedPatterns.withLockedValue { _ = $0.insert(subject) }
                logger.error("NATS refused the import subscription \(subject)")
            }
        }
        eventTasks.withLockedValue { $0.append(natsTask) }
        var options = ObservationOptions(policy: .queue(limit: configuration.queueLimit))
        // With a bucket, retained posts reach the bridge marked as such and cross through it. Marked posts are
        // never held (PROTOCOL.md § 9.4): a bridge without a bucket does not ask, so it stays a queue subscriber.
        options.marksRetainedPosts = mirror != nil
        for (index, pattern) in exportPatterns.enumerated() {
            let earlier = Array(exportPatterns[..<index])
            let observation = try center.observe(pattern.text, on: .immediate, options: options) { [self] notification in
                if carriedEarlier(by: earlier, text: \.text, { $0.matches(notification.name) }) { return }
                export(notification)
            }
            observations.withLockedValue { $0.append(observation) }
        }
        let importSubjects = importPatterns.map { mapping.subject(forPattern: $0.text) }
        for (index, subject) in importSubjects.enumerated() {
            let earlier = Array(importSubjects[..<index])
            _ = try nats.subscribe(subject) { [self] message in
                if carriedEarlier(by: earlier, text: { $0 }, { NATSSubject.matches(subject: message.subject, pattern: $0) }) {
                    return
                }
                importMessage(message)
            }
        }
        if let mirror {
            let mirrorTask = Task { await mirror.run() }
            eventTasks.withLockedValue { $0.append(mirrorTask) }
        }
    }

    /// The retained notification under which the bridge publishes its counters to local programs
    /// (`notifyctl status` shows them): `notifyd-bridge.status.HOST`.
    package var statusName: String { Self.statusPrefix + hostID }
    /// The prefix of every bridge's status name.
    package static let statusPrefix = "notifyd-bridge.status."

    /// Posts the counters as the retained `statusName` (JSON) every `interval` seconds while they change, until
    /// the task is cancelled.
    package func publishStatus(every interval: Duration) async {
        guard (try? NotifyCenter.validate(name: statusName)) != nil else {
            logger.warning("host id \(hostID) does not make a valid name: no status for notifyctl status")
            return
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        var last: BridgeStatistics?
        var refusal: String?
        while !Task.isCancelled {
            let now = statistics
            if now != last, let json = try? encoder.encode(BridgeStatus(host: hostID, statistics: now)) {
                // Acknowledged: a refusal (a reserved prefix, the retained quota) answers this call, and is not
                // mistaken for a refused import.
                do {
                    _ = try await center.postAndWait(statusName, payload: Array(json), retain: true)
                    last = now
                } catch NotifyError.rejected(let code, let message) {
                    // Refused (a reserved prefix, the retained quota): said once, tried again when counters change.
                    if refusal != message { logger.warning("the daemon refused the bridge's status: \(message) (\(String(describing: code)))") }
                    refusal = message
                    last = now
                } catch {
                    // Not connected, timed out: tried again at the next tick.
                }
            }
            try? await Task.sleep(for: interval)
        }
    }

    /// Waits until both sides are connected and subscribed (for tests and for a bridge that reports readiness).
    package func waitUntilReady(timeout: Double) async throws {
        try await center.waitUntilConnected(timeout: timeout)
        try await center.synchronize()
        try await nats.waitUntilConnected(timeout: .milliseconds(Int64(timeout * 1000)))
        try await nats.flush(timeout: .milliseconds(Int64(timeout * 1000)))
    }

    private func export(_ notification: ReceivedNotification) {
        if notification.isRetainedPost, let mirror {
            mirror.exportRetained(notification)
            return
        }
        var origin = origin(of: notification)
        origin.bridgeSequence = counters.exportSequence.load(ordering: .relaxed) + 1
        // Without a bucket, a retained post travels on its subject, marked so that importers post it retained.
        origin.retained = notification.isRetainedPost
        let payload = notification.withPayloadBytes { ByteBuffer(bytes: $0) }
        do {
            // Numbered only once NATS took it, so an importer's gap means a loss between the two bridges. Exports
            // all run on the center's one I/O thread (`.immediate`), so load-then-store cannot race.
            if try nats.publish(mapping.subject(forName: notification.name), payload: payload, headers: origin.headers) {
                counters.exportSequence.store(origin.bridgeSequence, ordering: .relaxed)
                counters.bump(.exported)
            }
        } catch NATSClientError.payloadTooLarge {
            counters.bump(.exportTooLarge)
        } catch {
            logger.error("cannot export \(notification.name): \(error)")
        }
    }

    /// The origin of a local notification this bridge carries: this host, the poster's credentials, its sequence.
    func origin(of notification: ReceivedNotification) -> Origin {
        Origin(
            host: hostID, uid: notification.sender.uid, gid: notification.sender.gid, pid: notification.sender.pid,
            sequence: notification.sequence, instance: instance)
    }

    private func importMessage(_ message: NATSMessage) {
        let origin = Origin(headers: message.headers)
        if let origin {
            // The daemon closes a connection whose origin host is empty or too long: refused here instead.
            guard origin.hasValidHost else {
                counters.bump(.importInvalidOrigin)
                return
            }
            if origin.host == hostID {
                counters.bump(.importSkippedOwn)
                if origin.instance != instance {
                    // Not this process's message (NATS does not echo): another bridge uses the same host id, as
                    // cloned machines sharing /etc/machine-id do. Counted and said, never silent.
                    counters.bump(.importHostIDClash)
                    warnHostIDClashOnce()
                }
                return
            }
            countGap(before: origin)
        }
        // Posting checks the name (PROTOCOL.md § 8), so the mapping only strips the prefix here.
        guard let name = mapping.unvalidatedName(forSubject: message.subject), !name.hasPrefix("self.") else {
            counters.bump(.importInvalidName)
            return
        }
        // A message from a plain NATS client has no origin headers: it is remote all the same.
        let source = origin ?? .plainNATS
        let relayed = source.notificationOrigin
        do {
            try center.post(name, payload: message.payload.readableBytesView, retain: source.retained, origin: relayed)
            counters.bump(.imported)
            if source.retained { mirror?.noteImportedRetained(name, origin: relayed) }
        } catch NotifyError.payloadTooLarge {
            counters.bump(.importTooLarge)
        } catch NotifyError.invalidName {
            counters.bump(.importInvalidName)
        } catch {
            counters.bump(.importLost)
            logger.error("cannot import \(name): \(error)")
        }
    }

    private func countGap(before origin: Origin) {
        guard origin.bridgeSequence > 0 else { return }
        let missing = lastSequence.withLockedValue { last -> UInt64 in
            defer { last[origin.host] = origin.bridgeSequence }
            // A first message, or a lower number (that bridge restarted): nothing to compare with.
            guard let previous = last[origin.host], origin.bridgeSequence > previous else { return 0 }
            return origin.bridgeSequence - previous - 1
        }
        if missing > 0 { counters.bump(.importGaps, by: missing) }
    }

    /// The counters so far.
    package var statistics: BridgeStatistics {
        var statistics = counters.snapshot
        let nats = nats.statistics
        statistics[.exportDropped] = nats.dropped
        statistics[.exportLostInFlight] = nats.lostInFlight
        statistics[.natsReconnects] = nats.reconnects
        statistics.natsConnected = self.nats.isConnected
        return statistics
    }

    /// Serves the counters in the Prometheus text format on a Unix socket at `path` until ``close()``.
    package func serveMetrics(at path: String) async throws {
        let channel = try await BridgeMetrics.serve(at: path, bridge: self, group: MultiThreadedEventLoopGroup.singleton)
        metricsChannels.withLockedValue { $0.append(channel) }
    }

    /// Stops carrying and closes both connections.
    package func close() async {
        for observation in observations.withLockedValue({ $0 }) { observation.cancel() }
        for task in eventTasks.withLockedValue({ $0 }) { task.cancel() }
        for channel in metricsChannels.withLockedValue({ $0 }) { try? await channel.close() }
        await mirror?.states.close()
        await nats.close()
        await center.close()
        mirrorBox.withLockedValue { $0 = nil }
    }
}
