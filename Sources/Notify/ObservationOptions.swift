/// Options of one observation.
public struct ObservationOptions: Sendable, Hashable {
    /// What the daemon does with notifications this process cannot take in time (it reads too slowly, or the
    /// center is suspended). Default: `DeliveryPolicy.coalesce`.
    public var policy: DeliveryPolicy
    /// Start with the name's retained notification (the last one posted with `retain`), if there is one,
    /// delivered with ``ReceivedNotification/isRetained`` set, before any newer notification.
    public var receivesCurrentValue: Bool

    /// Creates options.
    public init(policy: DeliveryPolicy = .coalesce, receivesCurrentValue: Bool = false) {
        self.policy = policy
        self.receivesCurrentValue = receivesCurrentValue
    }
}
