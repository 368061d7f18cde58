import Logging
import NIOEmbedded
import NotifyWire
import Testing

@testable import NotifyServer

/// `PatternTrie.forEachMatch(name:)` against the definition, `NotificationPattern.matches(_:)`, applied to every
/// pattern one by one.
@Suite("Pattern trie matching")
struct PatternTrieMatchingTests {
    /// Peers are only compared by identity here; they never see a channel.
    private static func makeConnections(_ count: Int) -> [Peer] {
        makeDetachedPeers(count, label: "pattern-trie-tests")
    }

    private typealias Entry = (pattern: NotificationPattern, connection: Peer)

    /// How many times each connection is reported (once per matching pattern, so counts matter).
    private static func trieMatches(_ trie: PatternTrie, _ name: String) -> [ObjectIdentifier: Int] {
        var counts: [ObjectIdentifier: Int] = [:]
        trie.forEachMatch(name: name) { counts[ObjectIdentifier($0.peer), default: 0] += 1 }
        return counts
    }

    private static func bruteForceMatches(_ entries: [Entry], _ name: String) -> [ObjectIdentifier: Int] {
        var counts: [ObjectIdentifier: Int] = [:]
        for entry in entries where entry.pattern.matches(name) {
            counts[ObjectIdentifier(entry.connection), default: 0] += 1
        }
        return counts
    }

    private static func expectSameMatches(
        _ trie: PatternTrie, _ entries: [Entry], names: [String], sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(trie.count == entries.count, sourceLocation: sourceLocation)
        for name in names {
            let expected = bruteForceMatches(entries, name)
            let actual = trieMatches(trie, name)
            #expect(
                actual == expected, "name \(Array(name.utf8)) ('\(name)')", sourceLocation: sourceLocation)
        }
    }

    /// Every valid pattern of 1 to 3 labels over `labels` (`>` only last).
    private static func allPatterns(over labels: [String]) throws -> [NotificationPattern] {
        var texts: [String] = labels
        var previous = labels
        for _ in 2...3 {
            previous = previous.filter { !$0.hasSuffix(">") }.flatMap { prefix in labels.map { prefix + "." + $0 } }
            texts += previous
        }
        return try texts.filter { !$0.dropLast().contains(">") }.map { try NotificationPattern($0) }
    }

    /// Every name of 1 to 4 labels over `labels`, empty labels included (the trie must not assume valid names).
    private static func allNames(over labels: [String]) -> [String] {
        var names: [String] = labels
        var previous = labels
        for _ in 2...4 {
            previous = previous.flatMap { prefix in labels.map { prefix + "." + $0 } }
            names += previous
        }
        return names
    }

    /// "café" precomposed and decomposed: equal as Swift Strings, different names on the wire.
    private static let precomposed = "caf\u{E9}"
    private static let decomposed = "cafe\u{301}"

    private static let names: [String] =
        allNames(over: ["a", "b", "", precomposed, decomposed])
        + ["", ".", "..", "a.", ".a", "a..b", "x.y.z.w.v", "ab", "a.bc", "\(precomposed)x", "b.\(decomposed).a"]

    @Test("Matches the brute-force definition for every combination of *, >, literals and non-ASCII labels")
    func exhaustiveSmallAlphabet() throws {
        let patterns = try Self.allPatterns(over: ["a", "b", "*", ">", Self.precomposed, Self.decomposed])
        let connections = Self.makeConnections(5)
        let trie = PatternTrie()
        var entries: [Entry] = []
        for (index, pattern) in patterns.enumerated() {
            let connection = connections[index % connections.count]
            trie.insert(pattern, connection)
            entries.append((pattern, connection))
            // Several connections on one pattern, and one connection on many patterns (reported once per pattern).
            if index % 7 == 0 {
                let other = connections[(index + 2) % connections.count]
                trie.insert(pattern, other)
                entries.append((pattern, other))
            }
        }
        Self.expectSameMatches(trie, entries, names: Self.names)

        // Remove every third entry, then everything, checking the pruned trie each time.
        var kept: [Entry] = []
        for (index, entry) in entries.enumerated() {
            if index % 3 == 0 {
                trie.remove(entry.pattern, entry.connection)
            } else {
                kept.append(entry)
            }
        }
        Self.expectSameMatches(trie, kept, names: Self.names)

        for entry in kept.reversed() { trie.remove(entry.pattern, entry.connection) }
        Self.expectSameMatches(trie, [], names: Self.names)

        // A trie emptied by removals must work like a new one.
        for entry in entries.prefix(40) { trie.insert(entry.pattern, entry.connection) }
        Self.expectSameMatches(trie, Array(entries.prefix(40)), names: Self.names)
    }

    @Test("Precomposed and decomposed labels are different labels, whichever is subscribed")
    func nonASCIILabelsCompareByteForByte() throws {
        let connections = Self.makeConnections(2)
        let trie = PatternTrie()
        trie.insert(try NotificationPattern("\(Self.precomposed).>"), connections[0])
        trie.insert(try NotificationPattern("x.\(Self.decomposed)"), connections[1])
        let precomposedOnly = [ObjectIdentifier(connections[0]): 1]
        let decomposedOnly = [ObjectIdentifier(connections[1]): 1]
        #expect(Self.trieMatches(trie, "\(Self.precomposed).y") == precomposedOnly)
        #expect(Self.trieMatches(trie, "\(Self.decomposed).y").isEmpty)
        #expect(Self.trieMatches(trie, "x.\(Self.decomposed)") == decomposedOnly)
        #expect(Self.trieMatches(trie, "x.\(Self.precomposed)").isEmpty)
    }

    @Test("Removing a pattern that is not there, or for another connection, changes nothing")
    func removingAbsentEntries() throws {
        let connections = Self.makeConnections(2)
        let trie = PatternTrie()
        let pattern = try NotificationPattern("a.*.c")
        trie.insert(pattern, connections[0])
        trie.remove(pattern, connections[1])
        trie.remove(try NotificationPattern("a.*"), connections[0])
        trie.remove(try NotificationPattern("a.b.c"), connections[0])
        #expect(trie.count == 1)
        #expect(Self.trieMatches(trie, "a.b.c") == [ObjectIdentifier(connections[0]): 1])
        trie.remove(pattern, connections[0])
        #expect(trie.count == 0)
        #expect(Self.trieMatches(trie, "a.b.c").isEmpty)
    }

    /// The name grammar splits on the scalar `.`, which a following combining mark does not change; a
    /// `Character`-based split would see ".\u{301}" as one character and one label.
    @Test("Labels are split on the byte '.', even when a combining mark follows it")
    func splitsOnTheDotByte() throws {
        let connections = Self.makeConnections(3)
        let trie = PatternTrie()
        trie.insert(try NotificationPattern("a.*"), connections[0])
        trie.insert(try NotificationPattern("a.\u{301}b.*"), connections[1])
        trie.insert(try NotificationPattern("*.*.*"), connections[2])
        #expect(Self.trieMatches(trie, "a.\u{301}b") == [ObjectIdentifier(connections[0]): 1])
        #expect(
            Self.trieMatches(trie, "a.\u{301}b.c")
                == [ObjectIdentifier(connections[1]): 1, ObjectIdentifier(connections[2]): 1])
        // NotificationPattern (retained notifications, introspection) splits the same way.
        #expect(try NotificationPattern("a.\u{301}b.*").labels.count == 3)
        #expect(try NotificationPattern("a.\u{301}b.*").matches("a.\u{301}b.c"))
        #expect(try !NotificationPattern("a.*").matches("a.\u{301}b.c"))
        trie.remove(try NotificationPattern("a.\u{301}b.*"), connections[1])
        #expect(trie.count == 2)
        #expect(Self.trieMatches(trie, "a.\u{301}b.c") == [ObjectIdentifier(connections[2]): 1])
    }
}
