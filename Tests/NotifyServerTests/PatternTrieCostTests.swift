import Logging
import NIOEmbedded
import NotifyWire
import Testing

@testable import NotifyServer

/// What patterns cost the daemon, counted rather than timed (issue 15: 65,536 patterns of 128 labels took
/// 1.8 GB and 0.8 s per post). A pattern adds at most one trie node per label, which is what its user is
/// charged (`pattern-labels-per-uid`), and matching a name visits each node at most once: a post's matching
/// work is bounded by the labels charged, however the patterns are built to branch.
@Suite("Pattern trie cost")
struct PatternTrieCostTests {
    /// `count` different patterns of `labels` labels that all match `name`: pattern `i` has `*` at the positions
    /// whose bit of `i` is set (cycling over 12 bits) and the name's label elsewhere, so the trie branches at
    /// every level and then each pattern runs on alone: a match must go down every branch.
    private static func adversarialPatterns(count: Int, labels: Int) throws -> (patterns: [NotificationPattern], name: String) {
        precondition(count <= 1 << 12 && labels >= 12)
        var patterns: [NotificationPattern] = []
        for index in 0..<count {
            let parts = (0..<labels).map { position in (index >> (position % 12)) & 1 == 1 ? "*" : "l\(position)" }
            patterns.append(try NotificationPattern(parts.joined(separator: ".")))
        }
        let name = (0..<labels).map { "l\($0)" }.joined(separator: ".")
        return (patterns, name)
    }

    @Test("nodes never exceed the labels charged, and one match visits each node at most once")
    func matchingWorkIsBoundedByChargedLabels() throws {
        let trie = PatternTrie()
        // Compared by identity only; it never sees a channel.
        let connection = makeDetachedPeers(1, label: "pattern-trie-cost")[0]
        let (patterns, name) = try Self.adversarialPatterns(count: 2_000, labels: 24)
        var charged = 0
        for pattern in patterns {
            trie.insert(pattern, connection)
            charged += PatternTrie.cost(of: pattern)
        }
        #expect(trie.nodeCount <= charged)

        var matches = 0
        let before = trie.nodesVisited
        trie.forEachMatch(name: name) { _ in matches += 1 }
        let visited = trie.nodesVisited - before
        #expect(matches == patterns.count, "every adversarial pattern matches")
        #expect(trie.nodeCount > 10 * patterns.count, "the patterns share little: \(trie.nodeCount) nodes")
        #expect(visited <= trie.nodeCount + 1, "one match visited \(visited) nodes of \(trie.nodeCount)")

        for pattern in patterns { trie.remove(pattern, connection) }
        #expect(trie.nodeCount == 0 && trie.count == 0, "removing every pattern frees every node")
    }

    @Test("a pattern's cost is its number of labels as the trie splits them; `>` adds none")
    func costOfPatterns() throws {
        #expect(PatternTrie.cost(of: try NotificationPattern("a.*.c")) == 3)
        #expect(PatternTrie.cost(of: try NotificationPattern("a.>")) == 1)
        #expect(PatternTrie.cost(of: try NotificationPattern("*")) == 1)
    }
}
