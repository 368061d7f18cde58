import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// What a key-value watch delivers.
package enum NATSKeyValueWatchEvent: Equatable, Sendable {
    /// A key's entry: first the current entry of every matching key, then each change as it happens.
    case entry(NATSKeyValueEntry)
    /// Every key's current entry has been delivered (once per watch, also when there were none); what follows
    /// are changes.
    case initialValuesDone
}

/// A running watch of a key-value bucket: iterate it for ``NATSKeyValueWatchEvent``s, in stream order.
///
/// The watch survives lost connections and server restarts: its server-side consumer is recreated to start after
/// the last revision delivered, so no change still in the bucket is skipped and none is delivered twice. It ends
/// with an error when the client is closed (``NATSClientError/closed``) or the bucket disappears
/// (``NATSKeyValueError/bucketNotFound(_:)``), also when it was deleted and created again since the
/// ``NATSKeyValue`` was opened (the new bucket's revisions start over, so neither the watch nor its user can go on
/// from the last one they saw).
/// Call ``stop()`` (or cancel the task that iterates) to end it; merely leaving a `for` loop does not.
package struct NATSKeyValueWatch: AsyncSequence, Sendable {
    /// The events.
    package typealias Element = NATSKeyValueWatchEvent

    /// Iterates the events; one iterator per watch.
    package struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncThrowingStream<NATSKeyValueWatchEvent, any Error>.AsyncIterator

        /// The next event, or nil once the watch was stopped.
        package mutating func next() async throws -> NATSKeyValueWatchEvent? { try await base.next() }
    }

    let stream: AsyncThrowingStream<NATSKeyValueWatchEvent, any Error>
    let watcher: NATSKeyValueWatcher

    /// Makes the iterator.
    package func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: stream.makeAsyncIterator()) }

    /// Ends the watch: the iteration ends, and the server-side consumer is deleted.
    package func stop() { watcher.finish(throwing: nil) }
}

extension NATSKeyValue {
    /// Watches the keys matching `keys` (`*` and a final `>` are wildcards): first the current entry of each
    /// (deleted ones included, as ``NATSKeyValueEntry/Operation/delete`` entries), then
    /// ``NATSKeyValueWatchEvent/initialValuesDone``, then every change, in stream order. A value the bucket
    /// replaced before the watch received it is skipped, as with the official clients: a bucket of history 1 keeps
    /// one entry per key, so a watch behind its writers sees the newer value (with its revision) instead.
    ///
    /// The watch is an ordered push consumer, as the official clients make it: memory-only, no acknowledgements,
    /// flow control answered and idle heartbeats every 5 s. A gap in its consumer sequence, a heartbeat naming
    /// a message not received, 10 s without a heartbeat, or a reconnection recreate it from the revision after
    /// the last one delivered.
    ///
    /// - Throws: ``NATSKeyValueError/invalidKey(_:)`` for a bad pattern; what creating the consumer throws.
    package func watch(keys: String = ">") async throws -> NATSKeyValueWatch {
        guard Self.isValidKeyPattern(keys) else { throw NATSKeyValueError.invalidKey(keys) }
        let (stream, continuation) = AsyncThrowingStream.makeStream(
            of: NATSKeyValueWatchEvent.self, throwing: (any Error).self)
        let watcher = NATSKeyValueWatcher(keyValue: self, filter: subjectPrefix + keys, continuation: continuation)
        continuation.onTermination = { _ in watcher.finish(throwing: nil) }
        try await watcher.start()
        return NATSKeyValueWatch(stream: stream, watcher: watcher)
    }
}

/// The machinery of a watch: its consumer's subscription, its recreation, and the delivery of its messages.
final class NATSKeyValueWatcher: Sendable {
    /// How often the server sends an idle heartbeat; two missed ones recreate the consumer.
    static let heartbeat = TimeAmount.seconds(5)

    private struct State {
        var sequencer = NATSKeyValueWatchSequencer()
        /// When the bucket's stream was created: as the bucket was opened (a watch of a ``NATSKeyValue`` is of the
        /// stream it was opened on), or, if that is unknown, as the first consumer found it.
        var streamCreated: String?
        var subscription: NATSClient.Subscription?
        var consumer: String?
        var stopped = false
        var restartID: UInt64 = 0
        var observer: UInt64?
        var watchdog: RepeatedTask?
        /// Something came from the consumer since the watchdog last looked.
        var active = true
    }

    let keyValue: NATSKeyValue
    let filter: String
    private let continuation: AsyncThrowingStream<NATSKeyValueWatchEvent, any Error>.Continuation
    private let state: NIOLockedValueBox<State>
    private var client: NATSClient { keyValue.jetStream.client }

    init(
        keyValue: NATSKeyValue, filter: String,
        continuation: AsyncThrowingStream<NATSKeyValueWatchEvent, any Error>.Continuation
    ) {
        self.keyValue = keyValue
        self.filter = filter
        self.continuation = continuation
        var initial = State()
        initial.streamCreated = keyValue.streamCreated
        state = NIOLockedValueBox(initial)
    }

    func start() async throws {
        let observer = client.addLifecycleObserver { [weak self] event in
            switch event {
            case .reconnected: self?.restart(reason: "reconnected")
            case .closed: self?.finish(throwing: NATSClientError.closed)
            }
        }
        guard let observer else { throw NATSClientError.closed }
        // Armed as a counted operation: a close() meanwhile keeps the client's thread until it is armed.
        guard client.state.withLockedValue({ client.beginOperation(&$0) }) else {
            client.removeLifecycleObserver(observer)
            throw NATSClientError.closed
        }
        let interval = TimeAmount.nanoseconds(Self.heartbeat.nanoseconds * 2)
        let watchdog = client.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) {
            [weak self] task in
            guard let self else { return task.cancel() }
            self.checkActivity()
        }
        client.endOperation()
        let stopped = state.withLockedValue { state -> Bool in
            state.observer = observer
            state.watchdog = watchdog
            return state.stopped
        }
        if stopped { return finish(throwing: nil) }
        do {
            try await createConsumer()
        } catch {
            finish(throwing: nil)
            throw error
        }
    }

    /// Ends the watch (with `error`, if any) and releases what it holds, once.
    func finish(throwing error: (any Error)?) {
        let taken = state.withLockedValue { state -> State? in
            guard !state.stopped else { return nil }
            state.stopped = true
            defer {
                state.subscription = nil
                state.consumer = nil
                state.observer = nil
                state.watchdog = nil
            }
            return state
        }
        guard let taken else { return }
        continuation.finish(throwing: error)
        taken.watchdog?.cancel()
        if let observer = taken.observer { client.removeLifecycleObserver(observer) }
        retire(subscription: taken.subscription, consumer: taken.consumer)
    }

    /// Creates a consumer for the sequencer's next generation, with a subscription of its own.
    private func createConsumer() async throws {
        let inbox = client.newInbox()
        let begun = state.withLockedValue { state -> (UInt64, NATSKeyValueWatchSequencer.Start, State)? in
            guard !state.stopped else { return nil }
            let (generation, start) = state.sequencer.beginConsumer()
            let old = state
            state.subscription = nil
            state.consumer = nil
            state.active = true
            return (generation, start, old)
        }
        guard let (generation, start, old) = begun else { return }
        retire(subscription: old.subscription, consumer: old.consumer)
        try await checkStreamIsTheSame()
        let subscription = try client.subscribe(inbox) { [weak self] message in
            self?.received(message, generation: generation)
        }
        let current = state.withLockedValue { state -> Bool in
            guard state.sequencer.generation == generation, !state.stopped else { return false }
            state.subscription = subscription
            return true
        }
        guard current else { return client.unsubscribe(subscription) }
        var config = NATSJetStream.ConsumerConfig(
            deliverSubject: inbox, deliverPolicy: "last_per_subject", filterSubject: filter, flowControl: true,
            idleHeartbeat: Self.heartbeat.nanoseconds, inactiveThreshold: nil)
        if case .sequence(let first) = start {
            config.deliverPolicy = "by_start_sequence"
            config.optStartSeq = first
        }
        let info: NATSJetStream.ConsumerInfo
        do {
            info = try await keyValue.jetStream.createConsumer(stream: keyValue.streamName, config: config)
        } catch {
            let mine = state.withLockedValue { state -> Bool in
                guard state.subscription == subscription else { return false }
                state.subscription = nil
                return true
            }
            if mine { client.unsubscribe(subscription) }
            throw error
        }
        // Checked again: the stream may have been replaced between the first check and the consumer's creation
        // (this narrows the window, it does not close it: the consumer's first messages are already coming).
        do {
            try await checkStreamIsTheSame()
        } catch {
            retire(subscription: nil, consumer: info.name)
            throw error
        }
        let kept = state.withLockedValue { state -> Bool in
            guard state.sequencer.generation == generation, !state.stopped else { return false }
            state.consumer = info.name
            if state.sequencer.consumerCreated(generation: generation, pending: info.numPending) {
                continuation.yield(.initialValuesDone)
            }
            return true
        }
        if !kept { retire(subscription: nil, consumer: info.name) }
    }

    /// Drops the current consumer at once (its later messages are ignored) and creates another in the background,
    /// retrying until it exists, the watch ends, or a newer restart takes over.
    private func restart(reason: String) {
        let begun = state.withLockedValue { state -> (UInt64, State)? in
            guard !state.stopped else { return nil }
            state.restartID += 1
            _ = state.sequencer.beginConsumer()
            let old = state
            state.subscription = nil
            state.consumer = nil
            return (state.restartID, old)
        }
        guard let (id, old) = begun else { return }
        client.logger.debug("NATS KV watch of \(filter): recreating its consumer (\(reason))")
        retire(subscription: old.subscription, consumer: old.consumer)
        Task { await self.recreate(id) }
    }

    private func recreate(_ id: UInt64) async {
        var delay = Duration.milliseconds(50)
        while state.withLockedValue({ !$0.stopped && $0.restartID == id }) {
            do {
                try await createConsumer()
                return
            } catch NATSClientError.closed {
                return finish(throwing: NATSClientError.closed)
            } catch NATSKeyValueError.bucketNotFound(let bucket) {
                return finish(throwing: NATSKeyValueError.bucketNotFound(bucket))
            } catch let error as NATSJetStreamAPIError where error.errorCode == NATSJetStreamAPIError.streamNotFound {
                return finish(throwing: NATSKeyValueError.bucketNotFound(keyValue.bucket))
            } catch {
                // JetStream still starting after a server restart, or the connection lost again: try again.
                client.logger.debug("NATS KV watch of \(filter): cannot recreate its consumer yet: \(error)")
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// Throws ``NATSKeyValueError/bucketNotFound(_:)`` if the bucket's stream is not the one the watch is of (it
    /// was deleted and created again meanwhile, even before the watch began); the first call records the stream if
    /// opening the bucket did not.
    private func checkStreamIsTheSame() async throws {
        guard let created = try await keyValue.jetStream.streamInfo(keyValue.streamName).created else { return }
        let replaced = state.withLockedValue { state -> Bool in
            guard let known = state.streamCreated else {
                state.streamCreated = created
                return false
            }
            return known != created
        }
        if replaced { throw NATSKeyValueError.bucketNotFound(keyValue.bucket) }
    }

    private func retire(subscription: NATSClient.Subscription?, consumer: String?) {
        if let subscription { client.unsubscribe(subscription) }
        guard let consumer else { return }
        let jetStream = keyValue.jetStream
        let stream = keyValue.streamName
        Task { try? await jetStream.deleteConsumer(stream: stream, name: consumer) }
    }

    private func checkActivity() {
        let idle = state.withLockedValue { state -> Bool in
            defer { state.active = false }
            return !state.active && state.consumer != nil && !state.stopped
        }
        if idle && client.isConnected { restart(reason: "no heartbeat for two intervals") }
    }

    /// A message for consumer `generation`: an entry, or a heartbeat or flow-control request (status 100).
    private func received(_ message: NATSMessage, generation: UInt64) {
        if let headers = message.headers, headers.status != nil, message.payload.readableBytes == 0 {
            state.withLockedValue { $0.active = true }
            if let reply = message.replyTo {
                // Flow control: answered at once, since the watch buffers what its reader has not taken yet.
                _ = try? client.publish(reply, payload: ByteBuffer())
                return
            }
            if let stalled = headers["Nats-Consumer-Stalled"] { _ = try? client.publish(stalled, payload: ByteBuffer()) }
            let last = headers["Nats-Last-Consumer"].flatMap { UInt64($0) }
            let outcome = state.withLockedValue { $0.sequencer.heartbeat(generation: generation, lastConsumerSequence: last) }
            if outcome == .reset { restart(reason: "heartbeat names consumer sequence \(last ?? 0)") }
            return
        }
        guard let reply = message.replyTo, let metadata = NATSJetStreamMetadata(replySubject: reply) else {
            client.logger.warning("NATS KV watch of \(filter): a message without JetStream metadata on \(message.subject)")
            return
        }
        let outcome = state.withLockedValue { state -> NATSKeyValueWatchSequencer.Outcome in
            state.active = true
            let outcome = state.sequencer.message(
                generation: generation, consumerSequence: metadata.consumerSequence,
                streamSequence: metadata.streamSequence, pending: metadata.pending)
            // Yielded under the lock, so entries and the marker keep the order the sequencer decided.
            if case .accept(let deliver, let done) = outcome {
                if deliver { continuation.yield(.entry(entry(from: message, metadata: metadata))) }
                if done { continuation.yield(.initialValuesDone) }
            }
            return outcome
        }
        if outcome == .reset { restart(reason: "consumer sequence gap at \(metadata.consumerSequence)") }
    }

    private func entry(from message: NATSMessage, metadata: NATSJetStreamMetadata) -> NATSKeyValueEntry {
        let key = message.subject.hasPrefix(keyValue.subjectPrefix)
            ? String(message.subject.dropFirst(keyValue.subjectPrefix.count)) : message.subject
        return NATSKeyValueEntry(
            bucket: keyValue.bucket, key: key, value: message.payload, headers: message.headers,
            revision: metadata.streamSequence, operation: NATSKeyValueEntry.operation(of: message.headers),
            created: Date(timeIntervalSince1970: Double(metadata.timestamp) / 1e9))
    }
}
