import NotifyWire

// State observations (NotifyCenter.observeStates): daemon subscriptions with the states flag, and the
// STATE_CHANGED frames they bring, routed by name like notifications.
extension CenterCore {
    func addStateObservation(
        _ patternText: String, sendingCurrent: Bool, target: DeliveryTarget,
        handler: @escaping @Sendable (StateChange) -> Void
    ) throws(NotifyError) -> ObservationCore {
        let pattern = try NotifyCenter.parsedPattern(patternText)
        guard !NotificationName.isProcessLocal(patternText) else {
            throw NotifyError.rejected(
                code: .invalidName, message: "'\(patternText)' is process-local: names starting with 'self.' have no state values")
        }
        // The policy means nothing to a state subscription: every one is made under the default.
        let key = SubscriptionKey(pattern: patternText, policy: .coalesce, watchesStates: true)
        let (core, schedule) = state.withLockedValue { state -> (ObservationCore, Bool) in
            let added = state.registry.add(pattern, key: key) { id, slot in
                ObservationCore(
                    id: id, name: patternText, key: key, stagingSlot: slot, sendingCurrentStates: sendingCurrent,
                    executor: target.makeExecutor(label: "notify.observation.\(id)"), backlog: backlog,
                    stateHandler: handler)
            }
            let core = added.core
            guard state.channel != nil else { return (core, false) }
            guard let (subscriptionID, probe) = state.registry.subscribeRequest(for: added, wantsCurrent: sendingCurrent)
            else { return (core, false) }
            let schedule = state.sendStateSubscription(
                pattern: patternText, subscriptionID: subscriptionID, sendingCurrentTo: sendingCurrent ? [core] : [],
                probe: probe)
            return (core, schedule)
        }
        if schedule { scheduleFlush() }
        return core
    }

    /// Hands a `STATE_CHANGED` to its observations (on the I/O thread): a current value to those of the
    /// `SUBSCRIBE` that asked for it, a change to every state observation whose pattern matches the name.
    func deliverStateChange(_ frame: StateChangedFrame) {
        if frame.isCurrent {
            guard case .currentStates(let cores, _) = state.withLockedValue({ $0.pending[frame.requestID] }) else { return }
            let change = StateChange(name: frame.name, value: frame.value, sender: nil, isCurrent: true)
            for core in cores { core.deliver(change) }
            return
        }
        var targets: [ObservationCore] = []
        state.withLockedValue { $0.registry.collectStateObservers(of: frame.name, into: &targets) }
        let change = StateChange(
            name: frame.name, value: frame.value, sender: SenderCredentials(frame.sender), isCurrent: false)
        // An observation waiting for its current values gets them first: a change the daemon sent before it
        // registered the observation's subscription is older than those values.
        for core in targets where !core.isWaitingForCurrentValue { core.deliver(change) }
    }
}

extension CenterCore.State {
    /// Sends a `SUBSCRIBE` with the states flag, asking for the current values when `cores` want them (they wait
    /// for them meanwhile). Returns `true` when the caller must schedule a flush.
    mutating func sendStateSubscription(
        pattern: String, subscriptionID: UInt32, sendingCurrentTo cores: [ObservationCore], probe: UInt32?
    ) -> Bool {
        for core in cores { core.beginWaitingForCurrentValue() }
        let request: PendingRequests.Request =
            cores.isEmpty ? .subscribe(pattern: pattern) : .currentStates(cores, probe: probe)
        let flags: SubscribeFlags = cores.isEmpty ? .states : [.states, .sendRetained]
        return sendRequest(request) {
            .subscribe(.init(requestID: $0, subscriptionID: subscriptionID, flags: flags, pattern: pattern))
        }
    }
}
