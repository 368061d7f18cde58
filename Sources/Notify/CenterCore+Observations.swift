import NotifyWire

// Adding and removing observations: the registry changes, and the daemon subscription follows.
extension CenterCore {
    func addObservation(
        _ patternText: String, target: DeliveryTarget, options: ObservationOptions,
        handler: @escaping @Sendable (ReceivedNotification) -> Void
    ) throws(NotifyError) -> ObservationCore {
        let pattern = try NotifyCenter.parsedPattern(patternText)
        let key = SubscriptionKey(
            pattern: patternText, policy: options.policy, marksRetained: options.marksRetainedPosts)
        let isLocal = NotificationName.isProcessLocal(patternText)
        let (core, schedule) = state.withLockedValue { state -> (ObservationCore, Bool) in
            let added = state.registry.add(pattern, key: key) { id, slot in
                ObservationCore(
                    id: id, name: patternText, key: key, stagingSlot: slot,
                    executor: target.makeExecutor(label: "notify.observation.\(id)"), backlog: backlog,
                    receivesCurrentValue: options.receivesCurrentValue, handler: handler)
            }
            let core = added.core
            guard !isLocal, state.channel != nil else { return (core, false) }
            let wantsCurrent = options.receivesCurrentValue
            // A probe fetches the current value atomically with its registration in the daemon.
            guard let (subscriptionID, probe) = state.registry.subscribeRequest(for: added, wantsCurrent: wantsCurrent)
            else { return (core, false) }
            let request: PendingRequests.Request
            if wantsCurrent {
                core.beginWaitingForCurrentValue()
                request = .currentValue([core], probe: probe)
            } else {
                request = .subscribe(pattern: patternText)
            }
            let schedule = state.sendRequest(request) {
                .subscribe(
                    .init(
                        requestID: $0, subscriptionID: subscriptionID,
                        flags: wantsCurrent ? key.subscribeFlags.union(.sendRetained) : key.subscribeFlags,
                        policy: options.policy.wire, pattern: patternText))
            }
            return (core, schedule)
        }
        if schedule { scheduleFlush() }
        if isLocal, options.receivesCurrentValue { core.finishWaitingForCurrentValue() }
        return core
    }

    func remove(_ core: ObservationCore) {
        let key = core.key
        let schedule = state.withLockedValue { state -> Bool in
            guard let subscriptionID = state.registry.remove(core),
                !NotificationName.isProcessLocal(key.pattern), state.channel != nil
            else { return false }
            return state.sendRequest(.unsubscribe(pattern: key.pattern)) {
                .unsubscribe(requestID: $0, subscriptionID: subscriptionID)
            }
        }
        if schedule { scheduleFlush() }
    }
}
