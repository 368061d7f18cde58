/// Options of one observation.
public struct ObservationOptions: Sendable, Hashable {
    /// What the daemon does with notifications this process cannot take in time (it reads too slowly, or the
    /// center is suspended). Default: `DeliveryPolicy.coalesce`.
    public var policy: DeliveryPolicy
    /// Start with the name's retained notification (the last one posted with `retain`), if there is one,
    /// delivered with ``ReceivedNotification/isRetained`` set, before any newer notification. Also for an
    /// observation made before the center has connected, and again on each reconnection (the value may have
    /// changed meanwhile), as state observations re-read their current values.
    public var receivesCurrentValue: Bool
    /// Tell posts made with `retain` from other posts: each notification this observation receives then reports
    /// ``ReceivedNotification/isRetainedPost``. Default: `false`.
    ///
    /// The daemon marks such posts only for subscriptions that ask for it (`SUBSCRIBE`'s marks-retained flag,
    /// which the center keeps after reconnecting); observations with and without it share no daemon subscription.
    /// A marked post is never held, merged or dropped for this process: one it cannot take in time makes the daemon
    /// close the connection (the center then reconnects), as a `disconnect` policy would.
    public var marksRetainedPosts: Bool

    /// Creates options.
    public init(policy: DeliveryPolicy = .coalesce, receivesCurrentValue: Bool = false, marksRetainedPosts: Bool = false) {
        self.policy = policy
        self.receivesCurrentValue = receivesCurrentValue
        self.marksRetainedPosts = marksRetainedPosts
    }
}
