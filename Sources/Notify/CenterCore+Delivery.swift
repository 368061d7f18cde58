import NIOCore
import NotifyWire

// Routing notifications to observations: the daemon's (on the I/O thread, staged per read burst) and
// process-local posts (on the poster's thread). Both ask the registry the same question.
extension CenterCore {
    /// Delivers a `NOTIFICATION` (its fields, undecoded) that continues the current ``NotificationRun``; returns
    /// `false`, having done nothing, when it does not (another name, routing changed, no run, or a layout the
    /// full decoder must judge), and the caller then decodes it and calls ``received(_:on:staging:)``.
    func deliverContinuingRun(_ bytes: UnsafeRawBufferPointer, staging: DeliveryStaging) -> Bool {
        guard staging.run.pointee.isOpen else { return false }
        let generation = routingGeneration.load(ordering: .acquiring)
        guard let fields = NotificationFrame.InPlaceFields(fields: bytes),
            staging.run.pointee.continues(name: fields.name, generation: generation)
        else { return false }
        let count = staging.run.pointee.observers.count
        guard count > 0 else { return true }
        let notification = ReceivedNotification(
            name: staging.run.pointee.name, storage: staging.storePayload(fields.payload), sequence: fields.sequence,
            sender: SenderCredentials(fields.sender))
        // Lent by the run (no reference counting per notification): safe while nothing an `.immediate` handler can
        // reach opens or closes the run, which only `received` and `deliver` do, on this thread, for the frames
        // after this one. The last observer (usually the only one) takes the notification itself, not a copy.
        for index in 0..<(count - 1) {
            let observer = staging.run.pointee.lentObserver(at: index)
            if !observer._withUnsafeGuaranteedRef({ $0.isWaitingForCurrentValue }) {
                staging.add(notification, for: observer)
            }
        }
        let last = staging.run.pointee.lentObserver(at: count - 1)
        if !last._withUnsafeGuaranteedRef({ $0.isWaitingForCurrentValue }) {
            staging.add(consume notification, for: last)
        }
        return true
    }

    func deliver(_ frame: NotificationFrame, mergedCount: UInt64, staging: DeliveryStaging) {
        // A reused buffer: a fresh array per notification was one of its allocations.
        var targets = staging.takeTargetBuffer()
        let generation = state.withLockedValue { state -> UInt64 in
            state.registry.collectObservers(of: frame.name, takingDrops: true, into: &targets)
            return routingGeneration.load(ordering: .relaxed)
        }
        if !targets.isEmpty {
            var notification = ReceivedNotification(
                name: frame.name, storage: frame.payload.withUnsafeReadableBytes { staging.storePayload($0) },
                sequence: frame.sequence, sender: SenderCredentials(frame.sender))
            notification.mergedCount = mergedCount
            notification.origin = frame.origin.map(NotificationOrigin.init)
            for (observer, drops) in targets where !observer.isWaitingForCurrentValue {
                notification.droppedBefore = drops
                staging.add(notification, for: observer)
            }
        }
        // The notifications after this one on the same name go to the same observers (their drop counts were
        // just taken; new ones arrive in an OVERFLOW frame, which ends the run).
        staging.run.pointee.open(name: frame.name, generation: generation, observers: targets.lazy.map(\.0))
        // Moved back, not copied: a second reference would make the buffer reallocate on its next use.
        staging.returnTargetBuffer(consume targets)
    }

    /// A post made with retain that the daemon marked (`RETAINED` with request id 0) because one of this
    /// connection's subscriptions asked for it: delivered as a notification to every observation its name reaches,
    /// reporting ``ReceivedNotification/isRetainedPost`` to those that asked (``ObservationOptions/marksRetainedPosts``).
    func deliverMarkedRetainedPost(_ frame: NotificationFrame, staging: DeliveryStaging) {
        var targets = staging.takeTargetBuffer()
        state.withLockedValue { $0.registry.collectObservers(of: frame.name, takingDrops: true, into: &targets) }
        if !targets.isEmpty {
            var notification = ReceivedNotification(
                name: frame.name, storage: frame.payload.withUnsafeReadableBytes { staging.storePayload($0) },
                sequence: frame.sequence, sender: SenderCredentials(frame.sender))
            notification.origin = frame.origin.map(NotificationOrigin.init)
            for (observer, drops) in targets where !observer.isWaitingForCurrentValue {
                notification.droppedBefore = drops
                notification.isRetainedPost = observer.key.marksRetained
                staging.add(notification, for: observer)
            }
        }
        // No run is opened: the NOTIFICATIONs after it go the full way (runs are for posts without retain).
        staging.returnTargetBuffer(consume targets)
    }

    /// A retained notification answers a request for the current value: only the observations that asked receive it.
    func deliverRetained(_ frame: NotificationFrame, requestID: UInt32) {
        guard case .currentValue(let cores, _) = state.withLockedValue({ $0.pending[requestID] }) else { return }
        var notification = ReceivedNotification(
            name: frame.name, payload: Array(frame.payload.readableBytesView), sequence: frame.sequence,
            sender: SenderCredentials(frame.sender))
        notification.isRetained = true
        notification.origin = frame.origin.map(NotificationOrigin.init)
        for core in cores { core.deliver(notification) }
    }

    /// Hands a `self.` post to this process's observations of it; returns how many there were.
    @discardableResult
    func postLocally(_ name: String, payload: UnsafeRawBufferPointer) -> Int {
        var targets: [(ObservationCore, UInt64)] = []
        state.withLockedValue { $0.registry.collectObservers(of: name, takingDrops: false, into: &targets) }
        guard !targets.isEmpty else { return 0 }
        let notification = ReceivedNotification(name: name, payload: Array(payload), sequence: 0, sender: localSender)
        for (observer, _) in targets { observer.deliver(notification) }
        return targets.count
    }
}
