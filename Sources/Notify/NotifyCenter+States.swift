extension NotifyCenter {
    /// Observes the state values of a name or pattern: `handler` runs on `target` for every
    /// ``setState(_:for:)`` any process makes on a matching name that this process may observe, in the order the
    /// values were set, until the returned ``Observation`` is cancelled or released.
    ///
    /// Every successful `setState` is a change, even one that sets the value the name already had. With
    /// `sendingCurrent`, the handler first receives the current value of every matching name that has one
    /// (``StateChange/isCurrent``, in byte order of the names), before any change. The daemon never drops or merges
    /// state changes: a process too slow to take them is disconnected, and the center reconnects and observes
    /// again (with `sendingCurrent`, receiving the current values again). A center whose configuration does not
    /// receive its own posts (``Configuration/receivesOwnPosts``) is not sent its own changes either.
    ///
    /// A state observation receives no notifications; observe the name with ``observe(_:on:options:isolation:handler:)``
    /// for those. Several state observations of one pattern in a process share one daemon subscription.
    ///
    /// - Parameters:
    ///   - pattern: the name, or a pattern with `*` and `>` labels (`self.` names have no state values).
    ///   - sendingCurrent: start with the current values of the matching names.
    ///   - target: where the handler runs; by default the calling context (see ``DeliveryTarget``).
    ///   - isolation: the caller's actor, used by ``DeliveryTarget/current``; leave the default.
    ///   - handler: called once per value.
    /// - Throws: ``NotifyError/invalidName(_:)``, or ``NotifyError/rejected(code:message:)`` for a `self.` pattern.
    public func observeStates(
        _ pattern: String, sendingCurrent: Bool = true, on target: DeliveryTarget = .current,
        isolation: isolated (any Actor)? = #isolation,
        handler: @escaping @Sendable (StateChange) -> Void
    ) throws -> Observation {
        let resolved = target.resolved(isolation: isolation)
        let core = try core.addStateObservation(pattern, sendingCurrent: sendingCurrent, target: resolved, handler: handler)
        return Observation(core: core, center: self)
    }
}
