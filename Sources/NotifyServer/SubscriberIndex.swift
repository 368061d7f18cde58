import NotifyWire

/// A peer's subscription as the index stores it: for each exact name or pattern a peer subscribed to, the
/// strongest of its subscriptions with that text, so a match carries the policy to deliver under.
struct Subscriber {
    let peer: Peer
    var subscriptionID: UInt32
    var policy: DeliveryPolicy
    /// Whether one of the peer's subscriptions with this text has the marks-retained flag (PROTOCOL.md § 6.2): a
    /// post made with retain then reaches the peer as `RETAINED(0)`. Fits in the struct's padding (no memory per
    /// subscription), and only posts made with retain look at it.
    var marksRetained = false

    /// Whether `other` should win over this one for the same peer: the stronger policy, and between equals the
    /// lower subscription id, so the choice does not depend on the order of the matches.
    func isWeaker(than other: Subscriber) -> Bool {
        other.policy.strength > policy.strength
            || (other.policy.strength == policy.strength && other.subscriptionID < subscriptionID)
    }
}

/// Who subscribed to what: the exact-name table and the pattern trie, with each peer at most once per name
/// or pattern, and a routing generation that every change bumps (parked routes compare it).
final class SubscriberIndex {
    /// The subscribers of one exact name. Most names have a single subscriber, kept inline: no list object and
    /// no array per name (memory per subscription is one of the daemon's targets).
    enum Subscribers {
        case one(Subscriber)
        case many(SubscriberList)

        var count: Int {
            switch self {
            case .one: 1
            case .many(let list): list.subscribers.count
            }
        }

        @inline(__always)
        func forEach(_ body: (Subscriber) -> Void) {
            switch self {
            case .one(let subscriber): body(subscriber)
            case .many(let list): for subscriber in list.subscribers { body(subscriber) }
            }
        }
    }

    /// The subscribers of a name with more than one, updated in place.
    final class SubscriberList {
        var subscribers: [Subscriber]

        init(_ subscribers: [Subscriber]) { self.subscribers = subscribers }
    }

    private var exact = NameTable<Subscribers>()
    private let patterns = PatternTrie()
    /// Counts the changes that outdate routes worked out before them.
    private(set) var generation: UInt64 = 0

    /// Names with at least one exact subscriber.
    var nameCount: Int { exact.count }
    /// Pattern entries (one per peer and pattern).
    var patternCount: Int { patterns.count }
    /// Pattern trie nodes: what all patterns cost in memory, and the most one match can visit.
    var patternNodeCount: Int { patterns.nodeCount }
    /// Pattern trie nodes visited by matches so far: the routing work a peer's frames cost.
    var patternNodesVisited: Int { patterns.nodesVisited }
    /// Names the exact table hashed so far (lookups and loading ahead).
    var exactNamesHashed: Int { exact.namesHashed }
    /// Names whose lookups were loaded ahead so far (``prefetchExactNames(into:_:)``).
    var exactNamesLoadedAhead: Int { exact.namesLoadedAhead }

    /// Outdates every route worked out so far (the access rules changed).
    func invalidateRoutes() { generation &+= 1 }

    /// Adds `subscriber` to the subscribers of exactly `name`, or replaces its peer's entry there.
    func set(_ subscriber: Subscriber, exact name: String) {
        generation &+= 1
        guard let entry = exact.find(name) else {
            exact.insert(name, .one(subscriber))
            return
        }
        switch exact.entries[entry].value {
        case .one(let other):
            exact.setValue(
                other.peer === subscriber.peer ? .one(subscriber) : .many(SubscriberList([other, subscriber])), at: entry)
        case .many(let list):
            if let index = list.subscribers.firstIndex(where: { $0.peer === subscriber.peer }) {
                list.subscribers[index] = subscriber
            } else {
                list.subscribers.append(subscriber)
            }
        }
    }

    /// Removes `peer`'s entry for exactly `name`.
    func remove(_ peer: Peer, exact name: String) {
        generation &+= 1
        guard let entry = exact.find(name) else { return }
        switch exact.entries[entry].value {
        case .one(let other):
            if other.peer === peer { exact.remove(at: entry) }
        case .many(let list):
            guard let index = list.subscribers.firstIndex(where: { $0.peer === peer }) else { return }
            list.subscribers.swapAt(index, list.subscribers.count - 1)
            list.subscribers.removeLast()
            if list.subscribers.count == 1 { exact.setValue(.one(list.subscribers[0]), at: entry) }
        }
    }

    /// Adds `subscriber` under `pattern`, or replaces its peer's entry there (`isNew`: it has none yet).
    func set(_ subscriber: Subscriber, pattern: NotificationPattern, isNew: Bool = false) {
        generation &+= 1
        patterns.set(pattern, subscriber, isNew: isNew)
    }

    /// Removes `peer`'s entry under `pattern`.
    func remove(_ peer: Peer, pattern: NotificationPattern) {
        generation &+= 1
        patterns.remove(pattern, peer)
    }

    /// The exact subscribers of `name`, if any; having them also proves it passed the name grammar when it
    /// was subscribed.
    func exactSubscribers(of name: String) -> Subscribers? { exact.value(for: name) }

    /// The name whose UTF-8 is `bytes` (as the table holds it: no `String` is built) and its exact subscribers,
    /// if it has any; the bytes then passed the name grammar when the name was subscribed. `entry` tells the name
    /// from others until the ``generation`` changes. `hash`: the name's hash from ``prefetchExactNames(into:_:)``,
    /// if the caller has it.
    @inline(__always)
    func exactEntry(named bytes: UnsafeRawBufferPointer, hash: Int?) -> (name: String, subscribers: Subscribers, entry: Int)? {
        guard let entry = exact.find(bytes, hash: hash) else { return nil }
        return (exact.entries[entry].name, exact.entries[entry].value, entry)
    }

    /// Starts loading the memory that lookups of the names `names` gives will read, all at once: a poster spreading
    /// its posts over many names otherwise waits for each lookup's cache misses in turn. `names` calls its argument
    /// once per frame ahead, with the name's UTF-8 or `nil` (not a post); `hashes` gets one element for each, the
    /// name's hash or `nil`, for ``exactEntry(named:hash:)``.
    func prefetchExactNames(into hashes: inout [Int?], _ names: (_ each: (UnsafeRawBufferPointer?) -> Void) -> Void) {
        hashes.removeAll(keepingCapacity: true)
        guard exact.count > 0 else { return }
        names { name in hashes.append(name.map { exact.prefetchSlot(of: $0) }) }
        for case let hash? in hashes { exact.prefetchEntry(hash: hash) }
        for case let hash? in hashes { exact.prefetchName(hash: hash) }
    }

    /// `peer`'s entry for exactly `name`, if it has one.
    func subscriber(of peer: Peer, exact name: String) -> Subscriber? {
        switch exact.value(for: name) {
        case nil: nil
        case .one(let subscriber): subscriber.peer === peer ? subscriber : nil
        case .many(let list): list.subscribers.first { $0.peer === peer }
        }
    }

    /// How many peers subscribed to exactly `name`.
    func subscriberCount(of name: ExactName) -> Int { exact.value(for: name.string)?.count ?? 0 }

    /// Every name with an exact subscriber.
    var exactNames: [ExactName] { exact.entries.map { ExactName($0.name) } }

    /// Whether a pattern matches `name` (the walk counts in ``patternNodesVisited``).
    func hasPatternMatch(_ name: String) -> Bool {
        guard patterns.count > 0 else { return false }
        var found = false
        patterns.forEachMatch(name: name) { _ in found = true }
        return found
    }

    /// Calls `body` for each entry matching `name`: its exact subscribers (looked up by the caller), then the
    /// patterns. A peer may come more than once (an exact name and patterns, or several patterns).
    @inline(__always)
    func forEachMatch(name: String, exactSubscribers: Subscribers?, _ body: (Subscriber) -> Void) {
        exactSubscribers?.forEach(body)
        if patterns.count > 0 {
            patterns.forEachMatch(name: name, body)
        }
    }
}
