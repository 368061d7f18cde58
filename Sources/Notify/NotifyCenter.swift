import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NotifyWire

/// A connection to the notifyd daemon: post notifications by name, and observe names with handlers that run
/// on the thread, queue or actor you choose.
///
/// ```swift
/// let center = try await NotifyCenter.connect()
/// let observation = try center.observe("com.example.hello", on: .queue(.main)) { notification in
///     print("hello from pid \(notification.sender.pid): \(notification.payloadString ?? "")")
/// }
/// try center.post("com.example.hello", text: "hi")
/// ```
///
/// A center owns one connection and one I/O thread. It reconnects by itself when the daemon goes away and
/// resubscribes every live observation. Names starting with `self.` never leave the process.
///
/// Requests that wait for the daemon (``synchronize()``, ``state(of:)``, the introspection calls, a post that
/// waits) end with `CancellationError` when their task is cancelled, all but ``suspend()``.
public final class NotifyCenter: Sendable {
    let core: CenterCore
    let owners = OwnerTable()
    let ownerSweep = NIOLockedValueBox<RepeatedTask?>(nil)

    /// The configuration the center was created with.
    public var configuration: Configuration { core.configuration }

    /// Creates a center and starts connecting in the background; use ``waitUntilConnected(timeout:)`` or
    /// ``connect(configuration:timeout:)`` to wait for the connection.
    public init(configuration: Configuration = Configuration()) {
        core = CenterCore(configuration: configuration)
        core.start()
    }

    deinit {
        ownerSweep.withLockedValue { $0?.cancel() }
        core.closeInBackground()
    }

    /// The process-wide center on the default socket, created (and connecting) on first use.
    public static let `default` = NotifyCenter()

    /// Creates a center and waits for its first connection.
    ///
    /// - Parameters:
    ///   - configuration: where to connect and how (the socket, reconnection, which daemon user to trust).
    ///   - timeout: seconds to wait for the handshake once a connection was accepted.
    /// - Throws: ``NotifyError/cannotConnect(path:reason:)`` at once when no daemon accepts the connection,
    ///   ``NotifyError/timedOut(operation:seconds:)`` when the handshake takes too long.
    public static func connect(configuration: Configuration = Configuration(), timeout: Double? = 10) async throws
        -> NotifyCenter
    {
        let center = NotifyCenter(configuration: configuration)
        try await center.core.waitUntilConnected(failFast: true, timeout: timeout)
        return center
    }

    /// Waits until the center is connected, through as many reconnection attempts as it takes.
    ///
    /// - Parameter timeout: seconds to wait at most; `nil` waits indefinitely.
    public func waitUntilConnected(timeout: Double? = nil) async throws {
        try await core.waitUntilConnected(failFast: false, timeout: timeout)
    }

    /// Closes the connection and stops the I/O thread. Pending requests fail with ``NotifyError/closed``;
    /// observations stop receiving notifications.
    public func close() async {
        ownerSweep.withLockedValue { $0?.cancel() }
        for observation in owners.removeEverything() { observation.cancel() }
        await core.close()
    }

    /// Checks `name` against the name grammar (`protocol/PROTOCOL.md` § 8) without contacting the daemon.
    ///
    /// - Throws: ``NotifyError/invalidName(_:)`` describing the first problem.
    public static func validate(name: String) throws(NotifyError) {
        do {
            try NotificationName.validate(name)
        } catch {
            throw NotifyError.invalidName(error)
        }
    }

    /// Checks a name or pattern (with `*` and `>` labels) without contacting the daemon.
    public static func validate(pattern: String) throws(NotifyError) {
        _ = try parsedPattern(pattern)
    }

    /// `pattern` parsed, or the ``NotifyError/invalidName(_:)`` that ``validate(pattern:)`` throws.
    static func parsedPattern(_ pattern: String) throws(NotifyError) -> NotificationPattern {
        do {
            return try NotificationPattern(pattern)
        } catch {
            throw NotifyError.invalidName(error)
        }
    }

    // MARK: Posting

    /// Posts a notification without waiting for the daemon.
    ///
    /// Posts from one center are sent in the order they were made, batched with other frames. If the daemon
    /// rejects the post (for example for permission reasons), the rejection arrives later as a
    /// ``ConnectionEvent/requestRejected(operation:error:)`` event; use `postAndWait` to get it
    /// as an error instead.
    ///
    /// - Throws: ``NotifyError/invalidName(_:)``, ``NotifyError/payloadTooLarge(size:limit:)``, or
    ///   ``NotifyError/notConnected(path:)`` while the center is between connections.
    ///
    /// With `retain`, the daemon also keeps the notification as the name's current value, handed to later
    /// observers that ask for it (``ObservationOptions/receivesCurrentValue``).
    public func post(_ name: String, payload: some Collection<UInt8> = [UInt8](), retain: Bool = false) throws {
        try withContiguousBytes(of: payload) { bytes in
            try core.post(name, payload: bytes, retain: retain)
        }
    }

    /// Posts a notification relayed from another host, with the `origin` the relay reports (PROTOCOL.md § 16).
    /// For `notifyd-bridge`; observers that see it get ``ReceivedNotification/origin``.
    package func post(
        _ name: String, payload: some Collection<UInt8>, retain: Bool, origin: NotificationOrigin
    ) throws {
        try withContiguousBytes(of: payload) { bytes in
            try core.post(name, payload: bytes, retain: retain, origin: origin.wire)
        }
    }

    /// Posts a notification whose payload is the array `payload`: the same as the generic `post`, without
    /// dispatching through `Collection` for the most common payload type.
    public func post(_ name: String, payload: [UInt8], retain: Bool = false) throws {
        try payload.withUnsafeBytes { bytes in
            try core.post(name, payload: bytes, retain: retain)
        }
    }

    /// Posts a notification whose payload is `text` in UTF-8.
    public func post(_ name: String, text: String, retain: Bool = false) throws {
        var text = text
        try text.withUTF8 { bytes in
            try core.post(name, payload: UnsafeRawBufferPointer(bytes), retain: retain)
        }
    }

    /// Posts a notification and waits for the daemon's receipt: the sequence number and how many connections it
    /// was delivered to.
    ///
    /// - Throws: as `post`, plus ``NotifyError/rejected(code:message:)`` when the daemon refuses
    ///   it and ``NotifyError/connectionLost(reason:)`` when the connection ends first.
    @discardableResult
    public func postAndWait(
        _ name: String, payload: some Collection<UInt8> = [UInt8](), retain: Bool = false
    ) async throws -> PostReceipt {
        try await core.postAcknowledged(name, payload: ByteBuffer(bytes: payload), retain: retain)
    }

    /// Posts a notification whose payload is the array `payload` and waits for the daemon's receipt: the
    /// counterpart of `post(_:payload:retain:)` for an array (see the overload for any collection of bytes).
    @discardableResult
    public func postAndWait(_ name: String, payload: [UInt8], retain: Bool = false) async throws -> PostReceipt {
        try await core.postAcknowledged(name, payload: ByteBuffer(bytes: payload), retain: retain)
    }

    /// Posts a notification whose payload is `text` in UTF-8 and waits for the daemon's receipt: the
    /// counterpart of ``post(_:text:retain:)``.
    @discardableResult
    public func postAndWait(_ name: String, text: String, retain: Bool = false) async throws -> PostReceipt {
        try await core.postAcknowledged(name, payload: ByteBuffer(string: text), retain: retain)
    }

    /// Returns once the daemon has processed everything this center sent before the call: subscriptions made
    /// before it are active, and posts made before it have been queued to every subscriber.
    ///
    /// - Throws: ``NotifyError/rejected(code:message:)`` when the daemon refused a subscription made since the
    ///   previous `synchronize()` (for example `permission-denied`): `observe` cannot wait for the daemon, so
    ///   this is where such a refusal surfaces as an error (it is also a connection event).
    public func synchronize() async throws {
        try await core.synchronize()
    }

    // MARK: Observing

    /// Observes a name: `handler` runs on `target` for every notification posted under it, in the order the
    /// daemon delivered them, until the returned ``Observation`` is cancelled or released.
    ///
    /// Several observations of one name in a process share one daemon subscription. Observations made while
    /// disconnected become active when the connection is (re-)established; call ``synchronize()`` to wait
    /// until the daemon has the subscription.
    ///
    /// `name` may be a pattern: `*` stands for one label and `>` (last) for one or more labels, as in
    /// `org.example.*.changed` or `org.example.>`.
    ///
    /// - Parameters:
    ///   - name: the notification name or pattern (`self.` names stay in this process).
    ///   - target: where the handler runs; by default the calling context (see ``DeliveryTarget``).
    ///   - options: the daemon's policy when this process falls behind, and whether to start with the current
    ///     (retained) value.
    ///   - isolation: the caller's actor, used by ``DeliveryTarget/current``; leave the default.
    ///   - handler: called once per notification.
    /// - Throws: ``NotifyError/invalidName(_:)``.
    public func observe(
        _ name: String, on target: DeliveryTarget = .current, options: ObservationOptions = ObservationOptions(),
        isolation: isolated (any Actor)? = #isolation,
        handler: @escaping @Sendable (ReceivedNotification) -> Void
    ) throws -> Observation {
        let resolved = target.resolved(isolation: isolation)
        let core = try core.addObservation(name, target: resolved, options: options, handler: handler)
        return Observation(core: core, center: self)
    }

    /// The notifications posted under `name`, as an asynchronous sequence.
    ///
    /// The sequence buffers up to `bufferLimit` notifications that its consumer has not taken yet; when it is
    /// full, the oldest is dropped and counted in ``NotificationSequence/droppedCount``. The subscription lasts
    /// while the sequence or one of its iterators is alive.
    public func notifications(named name: String, bufferLimit: Int = 1024) throws -> NotificationSequence {
        try NotificationSequence(center: self, name: name, bufferLimit: bufferLimit)
    }

    /// Connection events (connected, disconnected, dropped notifications, rejected requests) from now on.
    ///
    /// A center returned by ``connect(configuration:timeout:)`` (or once ``waitUntilConnected(timeout:)`` has
    /// returned) has already reported that connection: a stream made afterwards starts with the next event.
    public func connectionEvents() -> AsyncStream<ConnectionEvent> {
        core.connectionEvents()
    }
}

/// Calls `body` with `payload`'s bytes: in place when the collection stores them contiguously (an array, `Data`,
/// a buffer), otherwise copied once into an array.
private func withContiguousBytes<Result>(
    of payload: some Collection<UInt8>, _ body: (UnsafeRawBufferPointer) throws -> Result
) rethrows -> Result {
    if let result = try payload.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
        return result
    }
    return try Array(payload).withUnsafeBytes(body)
}
