import NIOConcurrencyHelpers
import NIOCore

extension NotifyCenter {
    /// Observes a name on behalf of `owner`, which is held weakly and passed to the handler, so the handler
    /// need not capture it.
    ///
    /// The center keeps the observation (you may ignore the returned token) until `owner` is released, you call
    /// ``removeObservers(owner:)`` or ``removeObservers(owner:name:)``, or the token is cancelled. There is at
    /// most one observation per (owner, name): observing the same name for the same owner again replaces the
    /// previous one. Once the owner is gone no handler runs; the center also notices released owners within
    /// about a second and drops their daemon subscriptions.
    ///
    /// - Throws: ``NotifyError/invalidName(_:)``.
    @discardableResult
    public func observe<Owner: AnyObject & Sendable>(
        _ name: String, owner: Owner, on target: DeliveryTarget = .current,
        isolation: isolated (any Actor)? = #isolation,
        handler: @escaping @Sendable (Owner, ReceivedNotification) -> Void
    ) throws -> Observation {
        let weakOwner = WeakReference(owner)
        let ownerID = ObjectIdentifier(owner)
        let selfReference = NIOLockedValueBox<Observation?>(nil)
        let observation = try observe(name, on: target, isolation: isolation) { [owners] notification in
            guard let owner = weakOwner.value else {
                // The owner is gone: end the observation from inside its own handler (which does not wait).
                if let observation = selfReference.withLockedValue({ $0 }) {
                    owners.remove(observation, ownerID: ownerID, name: name)
                    observation.cancel()
                }
                return
            }
            handler(owner, notification)
        }
        selfReference.withLockedValue { $0 = observation }
        let replaced = owners.insert(observation, owner: owner, name: name)
        replaced?.cancel()
        startSweepingReleasedOwners()
        return observation
    }

    /// Cancels every observation made for `owner` with ``observe(_:owner:on:isolation:handler:)``.
    public func removeObservers(owner: AnyObject) {
        for observation in owners.removeAll(owner: owner) { observation.cancel() }
    }

    /// Cancels the observation made for `owner` on `name`, if there is one.
    public func removeObservers(owner: AnyObject, name: String) {
        owners.remove(owner: owner, name: name)?.cancel()
    }

    /// Checks for released owners once a second, so their daemon subscriptions go away even if no notification
    /// arrives to reveal them.
    private func startSweepingReleasedOwners() {
        ownerSweep.withLockedValue { task in
            guard task == nil else { return }
            task = core.eventLoop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) {
                [weak owners] _ in
                for observation in owners?.removeReleased() ?? [] { observation.cancel() }
            }
        }
    }
}

/// A weak reference that can cross threads.
final class WeakReference<Value: AnyObject & Sendable>: Sendable {
    weak let value: Value?
    init(_ value: Value) { self.value = value }
}
