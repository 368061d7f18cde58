import Foundation
import Logging
import NIOCore
import NIOConcurrencyHelpers
import Notify
import NotifyNATS

/// Mirrors state values through a JetStream key-value bucket (`--kv-bucket`), so that every host sees the fleet's
/// current values, a host that starts later included.
///
/// Exported names: each value set locally is put under ``StateKeyMapping/key(forName:)`` (decimal text, origin in
/// the `Notifyd-Origin-*` headers). Imported names: the bucket's values are set locally, first every current one
/// (so the bucket decides what a starting host holds), then each change. Values the bridge sets itself are not
/// sent back to it (`HELLO`'s no-echo), so nothing loops; ``StateMirrorLedger`` keeps hosts that set one name at
/// once converging on the bucket's last value.
final class StateMirror: Sendable {
    private let bridge: Bridge
    private let bucket: String
    private let ledger = NIOLockedValueBox(StateMirrorLedger())
    /// Puts in the order the values were set: one at a time, so the bucket's order is the local one.
    private let puts: AsyncStream<(name: String, key: String, value: UInt64, origin: Origin, onlyIfAbsent: Bool)>
    private let putQueue: AsyncStream<(name: String, key: String, value: UInt64, origin: Origin, onlyIfAbsent: Bool)>.Continuation
    private let observations = NIOLockedValueBox<[Observation]>([])

    init(bridge: Bridge, bucket: String) {
        self.bridge = bridge
        self.bucket = bucket
        (puts, putQueue) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    private var counters: BridgeCounters { bridge.counters }
    private var logger: Logger { bridge.logger }

    private func isImported(_ name: String) -> Bool {
        bridge.importPatterns.contains { $0.matches(name) }
    }

    /// Opens the bucket (creating it if needed), imports its values, then starts exporting; returns once the
    /// mirror runs, and keeps it running until the task is cancelled.
    func run() async {
        guard let kv = await openBucket() else { return }
        await withTaskGroup(of: Void.self) { group in
            let initialValuesDone = AsyncStream<Void>.makeStream()
            if !bridge.importPatterns.isEmpty {
                group.addTask { await self.importValues(from: kv, initialValuesDone: initialValuesDone.continuation) }
                for await _ in initialValuesDone.stream { break }
            }
            group.addTask { await self.putValues(into: kv) }
            startExporting()
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
                logger.info("mirroring state values through the key-value bucket \(bucket)")
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

    // MARK: Bucket to local daemon

    private func importValues(from kv: NATSKeyValue, initialValuesDone: AsyncStream<Void>.Continuation) async {
        defer { initialValuesDone.finish() }
        do {
            for try await event in try await kv.watch(keys: StateKeyMapping.prefix + ">") {
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
        guard let name = StateKeyMapping.name(forKey: entry.key),
            let value = UInt64(String(buffer: entry.value))
        else {
            counters.bump(.stateInvalid)
            return
        }
        guard isImported(name) else { return }
        guard ledger.withLockedValue({ $0.received(entry.key, revision: entry.revision, value: value) }) else { return }
        await setLocally(name, value)
    }

    private func setLocally(_ name: String, _ value: UInt64) async {
        do {
            try await bridge.center.setState(value, for: name)
            counters.bump(.stateImported)
        } catch NotifyError.rejected(_, let message) {
            counters.bump(.stateRefused)
            logger.warning("the daemon refused the imported state of \(name): \(message)")
        } catch {
            counters.bump(.stateRefused)
            logger.warning("cannot set the imported state of \(name): \(error)")
        }
    }

    // MARK: Local daemon to bucket

    private func startExporting() {
        let patterns = bridge.exportPatterns
        for (index, pattern) in patterns.enumerated() {
            let earlier = Array(patterns[..<index])
            do {
                let observation = try bridge.center.observeStates(pattern.text, sendingCurrent: true, on: .immediate) {
                    [self] change in
                    if earlier.contains(where: { $0.matches(change.name) }) { return }
                    let sender = change.sender
                    let origin = Origin(
                        host: bridge.hostID, uid: sender?.uid ?? 0, gid: sender?.gid ?? 0, pid: sender?.pid ?? 0,
                        sequence: 0, instance: bridge.instance)
                    // A value the daemon held before the bridge started: for an imported name the bucket's
                    // value (already set here) decides, so it is only put where the bucket has none.
                    putQueue.yield(
                        (change.name, StateKeyMapping.key(forName: change.name), change.value, origin,
                         change.isCurrent && isImported(change.name)))
                }
                observations.withLockedValue { $0.append(observation) }
            } catch {
                logger.error("cannot watch the state values of \(pattern.text): \(error)")
            }
        }
    }

    private func putValues(into kv: NATSKeyValue) async {
        for await put in puts {
            ledger.withLockedValue { $0.willPut(put.key) }
            var revision: UInt64?
            do {
                var headers = put.origin.headers
                // The bucket refuses the put when the key has a value already (JetStream's expected last sequence).
                if put.onlyIfAbsent { headers.append("Nats-Expected-Last-Subject-Sequence", "0") }
                revision = try await kv.put(put.key, value: Array(String(put.value).utf8), headers: headers)
                counters.bump(.stateExported)
            } catch {
                if !put.onlyIfAbsent {
                    counters.bump(.stateExportFailed)
                    logger.warning("cannot put the state of \(put.name) into \(bucket): \(error)")
                }
            }
            if let newer = ledger.withLockedValue({ $0.didPut(put.key, revision: revision) }), isImported(put.name) {
                await setLocally(put.name, newer)
            }
        }
    }

    /// Stops exporting and importing.
    func stop() {
        putQueue.finish()
        for observation in observations.withLockedValue({ $0 }) { observation.cancel() }
    }
}
