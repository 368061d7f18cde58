import NotifyWire
import Testing

@testable import NotifyServer

/// A connection that subscribes to one name (or pattern) many times is listed once, under the strongest of those
/// subscriptions; finding it must not walk them all, or one connection with 65,536 subscriptions to a name,
/// unsubscribing and resubscribing in a loop, holds the event loop from everyone (quadratic in its subscriptions).
@Suite("Repeated subscriptions to one text")
struct RepeatedSubscriptionTests {
    /// The policy and subscription id `peer` is listed under for `text`, and whether it marks retained posts.
    private static func listing(_ index: SubscriberIndex, _ peer: Peer, _ text: String) throws -> (UInt32, DeliveryPolicy, Bool)? {
        let pattern = try NotificationPattern(text)
        var found: Subscriber?
        if pattern.hasWildcards {
            index.forEachMatch(name: text.replacingOccurrences(of: "*", with: "x").replacingOccurrences(of: ">", with: "x"),
                               exactSubscribers: nil) { if $0.peer === peer { found = $0 } }
        } else {
            found = index.subscriber(of: peer, exact: text)
        }
        return found.map { ($0.subscriptionID, $0.policy, $0.marksRetained) }
    }

    @Test("the strongest subscription is the one delivered under, then the next strongest when it is removed", arguments: ["org.example.a", "org.*.b"])
    func strongestWins(text: String) throws {
        let peer = makeDetachedPeers(1, label: "repeated")[0]
        let index = SubscriberIndex()
        var table = SubscriptionTable()
        let pattern = try NotificationPattern(text)
        table.add(5, .init(pattern, .coalesce), peer: peer, index: index)
        table.add(3, .init(pattern, .queue(limit: 10)), marksRetained: true, peer: peer, index: index)
        table.add(7, .init(pattern, .queue(limit: 1_000)), peer: peer, index: index)
        table.add(2, .init(pattern, .queue(limit: 1_000)), peer: peer, index: index)
        #expect(try Self.listing(index, peer, text)! == (2, .queue(limit: 1_000), true), "the larger queue, the lower id")

        _ = table.remove(2, peer: peer, index: index)
        #expect(try Self.listing(index, peer, text)! == (7, .queue(limit: 1_000), true))
        _ = table.remove(3, peer: peer, index: index)
        #expect(try Self.listing(index, peer, text)! == (7, .queue(limit: 1_000), false), "no subscription marks now")
        _ = table.remove(7, peer: peer, index: index)
        #expect(try Self.listing(index, peer, text)! == (5, .coalesce, false))
        // The id comes back with another policy: its old place in the order is forgotten.
        table.add(7, .init(pattern, .disconnect), peer: peer, index: index)
        #expect(try Self.listing(index, peer, text)! == (7, .disconnect, false))
        _ = table.remove(7, peer: peer, index: index)
        table.add(7, .init(pattern, .coalesce), peer: peer, index: index)
        #expect(try Self.listing(index, peer, text)! == (5, .coalesce, false), "the lower id between equals")
        #expect(table.remove(5, peer: peer, index: index)?.patternLabels == 0)
        let labels = pattern.hasWildcards ? PatternTrie.cost(of: pattern) : 0
        #expect(table.remove(7, peer: peer, index: index)?.patternLabels == labels, "given back with the last one")
        #expect(try Self.listing(index, peer, text) == nil, "no subscription left")
        #expect(table.count == 0)
    }

    @Test("a subscription removed below the top and added again with a weaker policy is ranked by its new policy", arguments: ["org.example.a", "org.*.b"])
    func staleRankBelowTheTop(text: String) throws {
        let peer = makeDetachedPeers(1, label: "repeated")[0]
        let index = SubscriberIndex()
        var table = SubscriptionTable()
        let pattern = try NotificationPattern(text)
        table.add(1, .init(pattern, .queue(limit: 100)), peer: peer, index: index)
        table.add(2, .init(pattern, .queue(limit: 10)), peer: peer, index: index)
        table.add(3, .init(pattern, .queue(limit: 5)), peer: peer, index: index)
        table.add(4, .init(pattern, .coalesce), peer: peer, index: index)
        _ = table.remove(2, peer: peer, index: index)
        table.add(2, .init(pattern, .coalesce), peer: peer, index: index)
        _ = table.remove(1, peer: peer, index: index)
        #expect(try Self.listing(index, peer, text)! == (3, .queue(limit: 5), false), "not 2, whose queue(10) is gone")
    }

    @Test("what a text's subscriptions keep stays within twice their number, however they churn or shrink")
    func storedRanksAreBounded() throws {
        let peer = makeDetachedPeers(1, label: "repeated")[0]
        let index = SubscriberIndex()
        var table = SubscriptionTable()
        let text = "org.example.bounded"
        let pattern = try NotificationPattern(text)
        table.add(1, .init(pattern, .queue(limit: 100)), peer: peer, index: index)
        for id in UInt32(2)...300 { table.add(id, .init(pattern, .coalesce), peer: peer, index: index) }
        var most = 0
        for round in 0..<6_000 {
            let id = UInt32(2 + round % 299)
            _ = table.remove(id, peer: peer, index: index)
            table.add(id, .init(pattern, .queue(limit: UInt32(1 + round % 50))), peer: peer, index: index)
            most = max(most, table.storedRanks(of: text))
        }
        #expect(most <= 2 * 300 + 17, "\(most) ranks kept for 300 subscriptions")
        for id in UInt32(2)...299 { _ = table.remove(id, peer: peer, index: index) }
        #expect(table.storedRanks(of: text) <= 2 * 2 + 16, "\(table.storedRanks(of: text)) ranks kept for 2 subscriptions")
        _ = table.remove(300, peer: peer, index: index)
        #expect(table.storedRanks(of: text) == 0, "one subscription left: no group")
        #expect(try Self.listing(index, peer, text)! == (1, .queue(limit: 100), false))
    }

    @Test("a connection that goes away gives back each pattern's labels once, however often it subscribed to it")
    func removeAllGivesLabelsBackOnce() throws {
        let peer = makeDetachedPeers(1, label: "repeated")[0]
        let index = SubscriberIndex()
        var table = SubscriptionTable()
        let repeated = try NotificationPattern("org.*.repeated")
        let single = try NotificationPattern("org.single.>")
        for id in UInt32(1)...50 { table.add(id, .init(repeated, .coalesce), peer: peer, index: index) }
        table.add(51, .init(single, .coalesce), peer: peer, index: index)
        for id in UInt32(52)...60 { table.add(id, .init(try NotificationPattern("org.example.n"), .coalesce), peer: peer, index: index) }
        let removed = table.removeAll(peer: peer, from: index)
        #expect(removed.subscriptions == 60)
        #expect(removed.patternLabels == PatternTrie.cost(of: repeated) + PatternTrie.cost(of: single))
        #expect(try Self.listing(index, peer, "org.*.repeated") == nil)
        #expect(try Self.listing(index, peer, "org.example.n") == nil)
        #expect(index.patternCount == 0 && index.nameCount == 0)
    }

    @Test("subscribing to one text 5,000 times and churning its strongest costs O(1) group entries per request", arguments: ["org.example.a", "org.*.b"])
    func churnIsNotQuadratic(text: String) throws {
        let peer = makeDetachedPeers(1, label: "repeated")[0]
        let index = SubscriberIndex()
        var table = SubscriptionTable()
        let pattern = try NotificationPattern(text)
        // Small enough not to hold a thread of the test run's cooperative pool for long (the in-process servers of
        // other tests start on it), large enough that walking the group would cost 10^4 times the bound.
        let count: UInt32 = 5_000
        for id in 2...count { table.add(id, .init(pattern, .coalesce), peer: peer, index: index) }
        var requests = Int(count) - 1
        for round in 0..<2_500 {
            // The strongest, unsubscribed and subscribed again: the subscriber an attacker would churn.
            table.add(1, .init(pattern, .queue(limit: 100)), peer: peer, index: index)
            _ = table.remove(1, peer: peer, index: index)
            // And one in the middle of the group, which never reaches the top.
            let other = UInt32(2 + round % 1_000)
            _ = table.remove(other, peer: peer, index: index)
            table.add(other, .init(pattern, .coalesce), peer: peer, index: index)
            requests += 4
        }
        #expect(try Self.listing(index, peer, text)! == (2, .coalesce, false))
        // Walking the group on each request would be about 5,000 entries each: 7 × 10^7 here.
        #expect(table.groupEntriesVisited <= 8 * requests,
                "\(table.groupEntriesVisited) group entries looked at for \(requests) requests")
    }
}
