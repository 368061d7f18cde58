import HeapModule
import NotifyWire

/// One peer's subscriptions with the same text (an exact name or a pattern it subscribed to more than once): the
/// index lists the peer once for all of them, under the strongest (``Subscriber/isWeaker(than:)``).
///
/// A connection may hold tens of thousands of subscriptions to one text and unsubscribe and resubscribe the
/// strongest in a loop, so adding, removing and finding the strongest cost O(log n) amortised, not a walk of
/// the group: a heap of ranks, where the rank of a removed subscription stays until it reaches the top.
struct SubscriptionGroup {
    /// A subscription's place in the order of ``Subscriber/isWeaker(than:)``: the stronger policy, and between
    /// equals the lower id, is greater.
    private struct Rank: Comparable {
        var strength: UInt64
        var id: UInt32

        static func < (lhs: Rank, rhs: Rank) -> Bool {
            lhs.strength < rhs.strength || (lhs.strength == rhs.strength && lhs.id > rhs.id)
        }
    }

    /// The strength of each subscription's policy, by id.
    private var members: [UInt32: UInt64] = [:]
    /// Every member's rank, and ranks of members removed since (or added again with another policy) that have
    /// not reached the top yet.
    private var ranks = Heap<Rank>()
    /// Members with the marks-retained flag.
    private var markingCount = 0

    /// The group of `id` alone.
    init(_ id: UInt32, _ policy: DeliveryPolicy, marksRetained: Bool) {
        insert(id, policy, marksRetained: marksRetained)
    }

    var count: Int { members.count }

    /// Whether one of the members has the marks-retained flag.
    var marksRetained: Bool { markingCount > 0 }

    /// Adds subscription `id` (not a member).
    ///
    /// - Returns: the ranks looked at (rebuilding the heap once stale ranks outnumber the members).
    @discardableResult
    mutating func insert(_ id: UInt32, _ policy: DeliveryPolicy, marksRetained: Bool) -> Int {
        members[id] = policy.strength
        ranks.insert(Rank(strength: policy.strength, id: id))
        if marksRetained { markingCount += 1 }
        return 1 + trimmed()
    }

    /// Removes subscription `id`, a member (`marksRetained`: whether it had the flag).
    ///
    /// - Returns: the ranks looked at (see ``insert(_:_:marksRetained:)``).
    @discardableResult
    mutating func remove(_ id: UInt32, marksRetained: Bool) -> Int {
        members[id] = nil
        if marksRetained { markingCount -= 1 }
        return trimmed()
    }

    /// Rebuilds the heap from the members once it holds more than twice as many ranks, and 16: stale ranks below
    /// the top are never popped, so a loop that removes and adds other members would grow it without bound, and a
    /// group that shrank would keep its largest heap. Costs the members, once per at least as many changes.
    ///
    /// - Returns: the ranks looked at.
    private mutating func trimmed() -> Int {
        guard ranks.count > 2 * members.count + 16 else { return 0 }
        ranks = Heap(members.map { Rank(strength: $1, id: $0) })
        return members.count
    }

    /// The ranks the heap holds, stale ones included (the tests bound it).
    var storedRanks: Int { ranks.count }

    /// The strongest member's id (the group is not empty), dropping the stale ranks above it.
    ///
    /// - Returns: the id, and the ranks looked at.
    mutating func strongest() -> (id: UInt32, visited: Int) {
        var visited = 0
        while let top = ranks.max {
            visited += 1
            if members[top.id] == top.strength { return (top.id, visited) }
            ranks.removeMax()
        }
        preconditionFailure("the strongest of an empty subscription group")
    }
}
