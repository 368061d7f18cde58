import Atomics
import NotifyWire

/// Every observation of a center, indexed for routing: the one place that says which observations a name
/// reaches, for the daemon's notifications and for process-local (`self.`) posts alike.
///
/// Observations of one pattern under one policy share a daemon subscription (``SubscriptionKey``). A value
/// kept under the center's lock; only ``generation`` is read without it.
struct ObservationRegistry: Sendable {
    /// One daemon subscription: a pattern (or name) under one policy, shared by its observations.
    private struct Subscription {
        var id: UInt32
        var pattern: NotificationPattern
        var observations: [ObservationCore]
    }

    private var subscriptions: [SubscriptionKey: Subscription] = [:]
    /// Observations of exact names (all policies), for routing without scanning.
    private var exactObservers: [ExactName: [ObservationCore]] = [:]
    /// Subscriptions with wildcards, matched against every incoming name.
    private var patternKeys: Set<SubscriptionKey> = []
    /// The same two for state observations, which `STATE_CHANGED` frames reach (and notifications never do).
    private var stateExactObservers: [ExactName: [ObservationCore]] = [:]
    private var statePatternKeys: Set<SubscriptionKey> = []
    private var keysByID: [UInt32: SubscriptionKey] = [:]
    /// `OVERFLOW` counts waiting to be attached to the next notification of their subscription.
    private var pendingDrops: [SubscriptionKey: UInt64] = [:]
    private var nextSubscriptionID: UInt32 = 1
    private var nextObservationID: UInt64 = 1
    /// Staging slots of removed observations, handed to new ones so the slots stay few (see ``DeliveryStaging``).
    private var freeSlots: [Int] = []
    private var slotCount = 0
    /// Bumped whenever observations are added or removed, so that the I/O thread can tell without the lock
    /// whether the observers it looked up for a ``NotificationRun`` are still current.
    let generation: ManagedAtomic<UInt64>

    init(generation: ManagedAtomic<UInt64>) {
        self.generation = generation
    }

    /// An observation just registered.
    struct Added {
        var core: ObservationCore
        /// Its daemon subscription's id.
        var subscriptionID: UInt32
        /// Whether it is the subscription's first observation (the daemon does not know it yet).
        var isNewSubscription: Bool
    }

    /// The `SUBSCRIBE` an added observation needs, if any: its subscription's, when the daemon does not know it
    /// yet; a short-lived extra subscription (`probe`), when an existing subscription cannot fetch the current
    /// value for one new observation; none otherwise.
    mutating func subscribeRequest(for added: Added, wantsCurrent: Bool) -> (subscriptionID: UInt32, probe: UInt32?)? {
        if added.isNewSubscription { return (added.subscriptionID, nil) }
        guard wantsCurrent else { return nil }
        let probe = makeSubscriptionID()
        return (probe, probe)
    }

    /// Registers the observation `make` builds from its id and staging slot.
    mutating func add(
        _ pattern: NotificationPattern, key: SubscriptionKey, make: (_ id: UInt64, _ stagingSlot: Int) -> ObservationCore
    ) -> Added {
        let id = nextObservationID
        nextObservationID += 1
        generation.wrappingIncrement(ordering: .releasing)
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            slot = slotCount
            slotCount += 1
        }
        let core = make(id, slot)
        if pattern.hasWildcards {
            if key.watchesStates { statePatternKeys.insert(key) } else { patternKeys.insert(key) }
        } else if key.watchesStates {
            stateExactObservers[ExactName(key.pattern), default: []].append(core)
        } else {
            exactObservers[ExactName(key.pattern), default: []].append(core)
        }
        if let existing = subscriptions[key] {
            subscriptions[key]!.observations.append(core)
            return Added(core: core, subscriptionID: existing.id, isNewSubscription: false)
        }
        let subscriptionID = makeSubscriptionID()
        subscriptions[key] = Subscription(id: subscriptionID, pattern: pattern, observations: [core])
        keysByID[subscriptionID] = key
        return Added(core: core, subscriptionID: subscriptionID, isNewSubscription: true)
    }

    /// Removes `core`; returns its subscription's id when it was the subscription's last observation.
    mutating func remove(_ core: ObservationCore) -> UInt32? {
        let key = core.key
        generation.wrappingIncrement(ordering: .releasing)
        if key.watchesStates, var exact = stateExactObservers[ExactName(key.pattern)] {
            exact.removeAll { $0 === core }
            stateExactObservers[ExactName(key.pattern)] = exact.isEmpty ? nil : exact
        } else if !key.watchesStates, var exact = exactObservers[ExactName(key.pattern)] {
            exact.removeAll { $0 === core }
            exactObservers[ExactName(key.pattern)] = exact.isEmpty ? nil : exact
        }
        guard var entry = subscriptions[key] else { return nil }
        let before = entry.observations.count
        entry.observations.removeAll { $0 === core }
        if entry.observations.count < before { freeSlots.append(core.stagingSlot) }
        guard entry.observations.isEmpty else {
            subscriptions[key] = entry
            return nil
        }
        subscriptions.removeValue(forKey: key)
        keysByID.removeValue(forKey: entry.id)
        patternKeys.remove(key)
        statePatternKeys.remove(key)
        pendingDrops.removeValue(forKey: key)
        return entry.id
    }

    /// Subscription ids start at 1 and skip 0 when they wrap: `OVERFLOW` uses 0 for the whole connection.
    mutating func makeSubscriptionID() -> UInt32 {
        let id = nextSubscriptionID
        nextSubscriptionID = nextSubscriptionID == UInt32.max ? 1 : nextSubscriptionID + 1
        return id
    }

    /// Appends every observation `name` reaches to `targets`, exact names first, then patterns in set order;
    /// with `takingDrops`, each with its subscription's waiting `OVERFLOW` count (which this clears).
    mutating func collectObservers(
        of name: String, takingDrops: Bool, into targets: inout [(ObservationCore, UInt64)]
    ) {
        if let exact = exactObservers[ExactName(name)] {
            if !takingDrops || exact.count == 1 {
                for core in exact { targets.append((core, takingDrops ? takeDrops(for: core.key) : 0)) }
            } else {
                // Observations of one subscription share its count: taken once, given to each (taking it again for
                // the second would find it cleared).
                var taken: [(key: SubscriptionKey, drops: UInt64)] = []
                for core in exact {
                    let drops = taken.first { $0.key == core.key }?.drops ?? takeDrops(for: core.key)
                    if !taken.contains(where: { $0.key == core.key }) { taken.append((core.key, drops)) }
                    targets.append((core, drops))
                }
            }
        }
        for key in patternKeys {
            guard let entry = subscriptions[key], entry.pattern.matches(name) else { continue }
            let drops = takingDrops ? takeDrops(for: key) : 0
            for core in entry.observations { targets.append((core, drops)) }
        }
    }

    /// Appends every state observation `name` reaches to `targets`, exact names first, then patterns.
    func collectStateObservers(of name: String, into targets: inout [ObservationCore]) {
        if let exact = stateExactObservers[ExactName(name)] { targets += exact }
        for key in statePatternKeys {
            guard let entry = subscriptions[key], entry.pattern.matches(name) else { continue }
            targets += entry.observations
        }
    }

    /// The `OVERFLOW` count waiting for the next notification of `key`, cleared; skips hashing the key in the
    /// usual case of no drops at all.
    private mutating func takeDrops(for key: SubscriptionKey) -> UInt64 {
        if pendingDrops.isEmpty { return 0 }
        return pendingDrops.removeValue(forKey: key) ?? 0
    }

    /// Counts an `OVERFLOW` towards its subscription's next notification; returns the subscription's pattern
    /// (`nil` for a connection-wide overflow or a subscription already gone).
    mutating func recordOverflow(subscriptionID: UInt32, dropped: UInt64) -> String? {
        guard let key = keysByID[subscriptionID] else { return nil }
        pendingDrops[key, default: 0] += dropped
        return key.pattern
    }

    /// The subscriptions a new connection must make again (process-local names never reach the daemon), with
    /// their observations.
    var daemonSubscriptions: [(key: SubscriptionKey, id: UInt32, observations: [ObservationCore])] {
        subscriptions.compactMap { key, entry in
            NotificationName.isProcessLocal(key.pattern) ? nil : (key, entry.id, entry.observations)
        }
    }
}

/// A daemon subscription's identity in the library: the pattern, the policy, and whether it watches state values
/// or marks retained posts.
struct SubscriptionKey: Hashable, Sendable {
    /// Compared byte for byte, as the daemon compares names.
    private var exactPattern: ExactName
    var policy: DeliveryPolicy
    /// Made with `SUBSCRIBE`'s states flag (``NotifyCenter/observeStates(_:sendingCurrent:on:isolation:handler:)``).
    var watchesStates: Bool
    /// Made with `SUBSCRIBE`'s marks-retained flag (``ObservationOptions/marksRetainedPosts``).
    var marksRetained: Bool

    init(pattern: String, policy: DeliveryPolicy, watchesStates: Bool = false, marksRetained: Bool = false) {
        self.exactPattern = ExactName(pattern)
        self.policy = policy
        self.watchesStates = watchesStates
        self.marksRetained = marksRetained
    }

    /// The `SUBSCRIBE` flags that make the subscription what it is (the caller adds send-retained when asking for
    /// current values).
    var subscribeFlags: SubscribeFlags {
        var flags: SubscribeFlags = []
        if watchesStates { flags.insert(.states) }
        if marksRetained { flags.insert(.marksRetained) }
        return flags
    }

    var pattern: String { exactPattern.string }
}
