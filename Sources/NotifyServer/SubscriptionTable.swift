import NotifyWire

/// One peer's subscriptions by id, kept in step with the ``SubscriberIndex``: the index lists the peer once per
/// exact name or pattern, under the strongest of its subscriptions with that text.
struct SubscriptionTable {
    /// One subscription. An exact name keeps only its text (a parsed pattern's label list would be most of the
    /// daemon's memory per subscription).
    enum Subscription {
        case exact(String, DeliveryPolicy)
        case pattern(NotificationPattern, DeliveryPolicy)

        /// A subscription to `pattern`: an exact name when it has no wildcard.
        init(_ pattern: NotificationPattern, _ policy: DeliveryPolicy) {
            self = pattern.hasWildcards ? .pattern(pattern, policy) : .exact(pattern.text, policy)
        }

        var text: String {
            switch self {
            case .exact(let name, _): name
            case .pattern(let pattern, _): pattern.text
            }
        }

        var policy: DeliveryPolicy {
            switch self {
            case .exact(_, let policy), .pattern(_, let policy): policy
            }
        }
    }

    private var byID: [UInt32: Subscription] = [:]
    /// The subscriptions per exact name the peer subscribed to more than once (rare: empty unless a client
    /// subscribes to one name twice).
    private var repeatedExact: [ExactName: SubscriptionGroup] = [:]
    /// The subscriptions per pattern text.
    private var patternGroups: [ExactName: SubscriptionGroup] = [:]
    /// The ids of the subscriptions with the marks-retained flag (empty for almost every peer).
    private var markingIDs: Set<UInt32> = []
    /// Group members looked at so far to find the strongest of a text's subscriptions (a wrapping count): what
    /// subscribing and unsubscribing cost beyond a constant, which the tests bound.
    private(set) var groupEntriesVisited = 0

    var count: Int { byID.count }

    subscript(id: UInt32) -> Subscription? { byID[id] }

    /// Whether subscription `id` has the marks-retained flag.
    func marksRetained(_ id: UInt32) -> Bool { !markingIDs.isEmpty && markingIDs.contains(id) }

    /// Every subscription with its id, by id (for a hand-over).
    var all: [(id: UInt32, subscription: Subscription)] {
        byID.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// The trie labels `subscription` adds, charged to the user: a pattern new to this peer adds its labels, an
    /// exact name or a pattern the peer has already adds none.
    func patternLabels(adding subscription: Subscription) -> Int {
        guard case .pattern(let pattern, _) = subscription, patternGroups[ExactName(pattern.text)] == nil else { return 0 }
        return PatternTrie.cost(of: pattern)
    }

    /// Adds a subscription and lists `peer` in `index` under the strongest of its subscriptions with that text
    /// (marking retained posts if any of them has the flag, `marksRetained`).
    mutating func add(
        _ id: UInt32, _ subscription: Subscription, marksRetained: Bool = false, peer: Peer, index: SubscriberIndex
    ) {
        byID[id] = subscription
        if marksRetained { markingIDs.insert(id) }
        switch subscription {
        case .pattern(let pattern, let policy):
            let key = ExactName(pattern.text)
            let isNew = patternGroups[key] == nil
            if isNew {
                patternGroups[key] = SubscriptionGroup(id, policy, marksRetained: marksRetained)
            } else {
                groupEntriesVisited &+= patternGroups[key]!.insert(id, policy, marksRetained: marksRetained)
            }
            index.set(strongest(patternGroups[key]!.strongest(), of: patternGroups[key]!, peer: peer), pattern: pattern, isNew: isNew)
        case .exact(let name, let policy):
            let key = ExactName(name)
            if repeatedExact[key] != nil {
                groupEntriesVisited &+= repeatedExact[key]!.insert(id, policy, marksRetained: marksRetained)
            } else if let existing = index.subscriber(of: peer, exact: name) {
                var group = SubscriptionGroup(
                    existing.subscriptionID, existing.policy, marksRetained: self.marksRetained(existing.subscriptionID))
                group.insert(id, policy, marksRetained: marksRetained)
                repeatedExact[key] = group
            } else {
                index.set(
                    Subscriber(peer: peer, subscriptionID: id, policy: policy, marksRetained: marksRetained), exact: name)
                return
            }
            index.set(strongest(repeatedExact[key]!.strongest(), of: repeatedExact[key]!, peer: peer), exact: name)
        }
    }

    /// Removes a subscription, and `peer`'s entry from `index` when no other subscription has its text.
    ///
    /// - Returns: the subscription and the pattern labels it gave back (a pattern no other subscription of the
    ///   peer has), or `nil` if there is no subscription with this id.
    mutating func remove(_ id: UInt32, peer: Peer, index: SubscriberIndex) -> (Subscription, patternLabels: Int)? {
        guard let subscription = byID.removeValue(forKey: id) else { return nil }
        let marked = markingIDs.remove(id) != nil
        switch subscription {
        case .pattern(let pattern, _):
            let key = ExactName(pattern.text)
            patternGroups[key]!.remove(id, marksRetained: marked)
            if patternGroups[key]!.count == 0 {
                patternGroups[key] = nil
                index.remove(peer, pattern: pattern)
                return (subscription, PatternTrie.cost(of: pattern))
            }
            index.set(strongest(patternGroups[key]!.strongest(), of: patternGroups[key]!, peer: peer), pattern: pattern)
        case .exact(let name, _):
            let key = ExactName(name)
            guard repeatedExact[key] != nil else {
                index.remove(peer, exact: name)
                return (subscription, 0)
            }
            repeatedExact[key]!.remove(id, marksRetained: marked)
            index.set(strongest(repeatedExact[key]!.strongest(), of: repeatedExact[key]!, peer: peer), exact: name)
            if repeatedExact[key]!.count == 1 { repeatedExact[key] = nil }
        }
        return (subscription, 0)
    }

    /// Removes every subscription and `peer`'s entries from `index` (the peer is gone).
    ///
    /// - Returns: how many subscriptions there were and the pattern labels they gave back.
    mutating func removeAll(peer: Peer, from index: SubscriberIndex) -> (subscriptions: Int, patternLabels: Int) {
        var labels = 0
        for subscription in byID.values {
            switch subscription {
            case .exact(let name, _):
                index.remove(peer, exact: name)
            case .pattern(let pattern, _):
                // Once per pattern: its first subscription takes the entry and the labels with it.
                guard patternGroups.removeValue(forKey: ExactName(pattern.text)) != nil else { continue }
                index.remove(peer, pattern: pattern)
                labels += PatternTrie.cost(of: pattern)
            }
        }
        let count = byID.count
        byID.removeAll()
        repeatedExact.removeAll()
        patternGroups.removeAll()
        markingIDs.removeAll()
        return (count, labels)
    }

    /// The strongest subscription of `group`, `chosen`, as the index lists it: marking retained posts if any of
    /// the group's subscriptions does.
    private mutating func strongest(
        _ chosen: (id: UInt32, visited: Int), of group: SubscriptionGroup, peer: Peer
    ) -> Subscriber {
        groupEntriesVisited &+= chosen.visited
        return Subscriber(
            peer: peer, subscriptionID: chosen.id, policy: byID[chosen.id]!.policy, marksRetained: group.marksRetained)
    }
}
