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
    /// The ids of the subscriptions per exact name the peer subscribed to more than once (rare: empty unless a
    /// client subscribes to one name twice).
    private var repeatedExact: [ExactName: [UInt32]] = [:]
    /// The ids of the subscriptions per pattern text.
    private var patternIDs: [ExactName: [UInt32]] = [:]
    /// The ids of the subscriptions with the marks-retained flag (empty for almost every peer).
    private var markingIDs: Set<UInt32> = []

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
        guard case .pattern(let pattern, _) = subscription, patternIDs[ExactName(pattern.text)] == nil else { return 0 }
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
        case .pattern(let pattern, _):
            let key = ExactName(pattern.text)
            let isNew = patternIDs[key] == nil
            patternIDs[key, default: []].append(id)
            index.set(strongest(of: patternIDs[key]!, peer: peer), pattern: pattern, isNew: isNew)
        case .exact(let name, let policy):
            let key = ExactName(name)
            if repeatedExact[key] != nil {
                repeatedExact[key]!.append(id)
            } else if let existing = index.subscriber(of: peer, exact: name) {
                repeatedExact[key] = [existing.subscriptionID, id]
            } else {
                index.set(
                    Subscriber(peer: peer, subscriptionID: id, policy: policy, marksRetained: marksRetained), exact: name)
                return
            }
            index.set(strongest(of: repeatedExact[key]!, peer: peer), exact: name)
        }
    }

    /// Removes a subscription, and `peer`'s entry from `index` when no other subscription has its text.
    ///
    /// - Returns: the subscription and the pattern labels it gave back (a pattern no other subscription of the
    ///   peer has), or `nil` if there is no subscription with this id.
    mutating func remove(_ id: UInt32, peer: Peer, index: SubscriberIndex) -> (Subscription, patternLabels: Int)? {
        guard let subscription = byID.removeValue(forKey: id) else { return nil }
        markingIDs.remove(id)
        switch subscription {
        case .pattern(let pattern, _):
            let key = ExactName(pattern.text)
            patternIDs[key]!.removeAll { $0 == id }
            if patternIDs[key]!.isEmpty {
                patternIDs[key] = nil
                index.remove(peer, pattern: pattern)
                return (subscription, PatternTrie.cost(of: pattern))
            }
            index.set(strongest(of: patternIDs[key]!, peer: peer), pattern: pattern)
        case .exact(let name, _):
            let key = ExactName(name)
            guard repeatedExact[key] != nil else {
                index.remove(peer, exact: name)
                return (subscription, 0)
            }
            repeatedExact[key]!.removeAll { $0 == id }
            let remaining = repeatedExact[key]!
            if remaining.count == 1 { repeatedExact[key] = nil }
            index.set(strongest(of: remaining, peer: peer), exact: name)
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
                guard patternIDs.removeValue(forKey: ExactName(pattern.text)) != nil else { continue }
                index.remove(peer, pattern: pattern)
                labels += PatternTrie.cost(of: pattern)
            }
        }
        let count = byID.count
        byID.removeAll()
        repeatedExact.removeAll()
        patternIDs.removeAll()
        markingIDs.removeAll()
        return (count, labels)
    }

    /// The strongest of the subscriptions `ids` (see ``Subscriber/isWeaker(than:)``), marking retained posts if
    /// any of them does.
    private func strongest(of ids: [UInt32], peer: Peer) -> Subscriber {
        var best: Subscriber?
        var marks = false
        for id in ids {
            let candidate = Subscriber(peer: peer, subscriptionID: id, policy: byID[id]!.policy)
            if best == nil || best!.isWeaker(than: candidate) { best = candidate }
            marks = marks || marksRetained(id)
        }
        best!.marksRetained = marks
        return best!
    }
}
