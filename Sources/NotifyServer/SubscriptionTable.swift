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
    /// The subscriptions per text (an exact name or a pattern) the peer subscribed to more than once (rare: empty
    /// unless a client subscribes to one text twice).
    private var repeated: [ExactName: SubscriptionGroup] = [:]
    /// The subscription of each pattern the peer subscribed to once (an exact name's is the index's entry).
    private var singlePatterns: [ExactName: UInt32] = [:]
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

    /// The ranks held for the subscriptions with `text`, stale ones included (0 unless it has several).
    func storedRanks(of text: String) -> Int { repeated[ExactName(text)]?.storedRanks ?? 0 }

    /// The trie labels `subscription` adds, charged to the user: a pattern new to this peer adds its labels, an
    /// exact name or a pattern the peer has already adds none.
    func patternLabels(adding subscription: Subscription) -> Int {
        guard case .pattern(let pattern, _) = subscription else { return 0 }
        let key = ExactName(pattern.text)
        guard singlePatterns[key] == nil, repeated[key] == nil else { return 0 }
        return PatternTrie.cost(of: pattern)
    }

    /// Adds a subscription and lists `peer` in `index` under the strongest of its subscriptions with that text
    /// (marking retained posts if any of them has the flag, `marksRetained`).
    mutating func add(
        _ id: UInt32, _ subscription: Subscription, marksRetained: Bool = false, peer: Peer, index: SubscriberIndex
    ) {
        byID[id] = subscription
        if marksRetained { markingIDs.insert(id) }
        let key = ExactName(subscription.text)
        if repeated[key] != nil {
            groupEntriesVisited &+= repeated[key]!.insert(id, subscription.policy, marksRetained: marksRetained)
        } else if let other = onlyOther(subscription, key, peer: peer, index: index) {
            var group = SubscriptionGroup(other, byID[other]!.policy, marksRetained: self.marksRetained(other))
            group.insert(id, subscription.policy, marksRetained: marksRetained)
            repeated[key] = group
            singlePatterns[key] = nil
        } else {
            let subscriber = Subscriber(peer: peer, subscriptionID: id, policy: subscription.policy, marksRetained: marksRetained)
            switch subscription {
            case .exact(let name, _): index.set(subscriber, exact: name)
            case .pattern(let pattern, _):
                singlePatterns[key] = id
                index.set(subscriber, pattern: pattern, isNew: true)
            }
            return
        }
        listStrongest(key, subscription, peer: peer, index: index)
    }

    /// Removes a subscription, and `peer`'s entry from `index` when no other subscription has its text.
    ///
    /// - Returns: the subscription and the pattern labels it gave back (a pattern no other subscription of the
    ///   peer has), or `nil` if there is no subscription with this id.
    mutating func remove(_ id: UInt32, peer: Peer, index: SubscriberIndex) -> (Subscription, patternLabels: Int)? {
        guard let subscription = byID.removeValue(forKey: id) else { return nil }
        let marked = markingIDs.remove(id) != nil
        let key = ExactName(subscription.text)
        guard repeated[key] != nil else {
            if case .pattern = subscription { singlePatterns[key] = nil }
            return (subscription, Self.unlist(subscription, peer: peer, index: index))
        }
        groupEntriesVisited &+= repeated[key]!.remove(id, marksRetained: marked)
        let remaining = listStrongest(key, subscription, peer: peer, index: index)
        if repeated[key]!.count == 1 {
            repeated[key] = nil
            if case .pattern = subscription { singlePatterns[key] = remaining }
        }
        return (subscription, 0)
    }

    /// Removes every subscription and `peer`'s entries from `index` (the peer is gone).
    ///
    /// - Returns: how many subscriptions there were and the pattern labels they gave back.
    mutating func removeAll(peer: Peer, from index: SubscriberIndex) -> (subscriptions: Int, patternLabels: Int) {
        var labels = 0
        for subscription in byID.values where repeated.isEmpty || repeated[ExactName(subscription.text)] == nil {
            labels += Self.unlist(subscription, peer: peer, index: index)
        }
        // Once per repeated text (a name subscribed to 65,536 times is one entry in the index): by its first
        // subscription met, which takes the group with it.
        if !repeated.isEmpty {
            for subscription in byID.values where repeated.removeValue(forKey: ExactName(subscription.text)) != nil {
                labels += Self.unlist(subscription, peer: peer, index: index)
            }
        }
        let count = byID.count
        byID.removeAll()
        repeated.removeAll()
        singlePatterns.removeAll()
        markingIDs.removeAll()
        return (count, labels)
    }

    /// The id of the one subscription `peer` has with the text of `subscription` (`key`), if it has exactly one.
    /// An exact name's is the index's entry for `peer`, which only this table writes (the state watchers have
    /// an index of their own).
    private func onlyOther(_ subscription: Subscription, _ key: ExactName, peer: Peer, index: SubscriberIndex) -> UInt32? {
        switch subscription {
        case .exact(let name, _): index.subscriber(of: peer, exact: name)?.subscriptionID
        case .pattern: singlePatterns[key]
        }
    }

    /// Lists `peer` in `index` under the strongest subscription of the group `key` (the text of `subscription`),
    /// marking retained posts if any of the group's subscriptions does.
    ///
    /// - Returns: the strongest subscription's id.
    @discardableResult
    private mutating func listStrongest(
        _ key: ExactName, _ subscription: Subscription, peer: Peer, index: SubscriberIndex
    ) -> UInt32 {
        let (id, visited) = repeated[key]!.strongest()
        groupEntriesVisited &+= visited
        let subscriber = Subscriber(
            peer: peer, subscriptionID: id, policy: byID[id]!.policy, marksRetained: repeated[key]!.marksRetained)
        switch subscription {
        case .exact(let name, _): index.set(subscriber, exact: name)
        case .pattern(let pattern, _): index.set(subscriber, pattern: pattern)
        }
        return id
    }

    /// Removes `peer`'s entry for `subscription`'s text from `index`.
    ///
    /// - Returns: the pattern labels it gives back.
    private static func unlist(_ subscription: Subscription, peer: Peer, index: SubscriberIndex) -> Int {
        switch subscription {
        case .exact(let name, _):
            index.remove(peer, exact: name)
            return 0
        case .pattern(let pattern, _):
            index.remove(peer, pattern: pattern)
            return PatternTrie.cost(of: pattern)
        }
    }
}
