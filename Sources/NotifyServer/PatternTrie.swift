#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NotifyWire

/// Pattern subscriptions indexed by label, so matching a name walks only the branches its labels select: the
/// cost does not grow with the number of patterns that cannot match.
///
/// Labels are the byte runs between `.` bytes, as in the name grammar (`NotificationName.validate` splits on the
/// scalar `.`, which in UTF-8 is always the single byte 0x2E), and are compared byte for byte like `ExactName`.
final class PatternTrie {
    final class Node {
        var literal: [LabelKey: Node] = [:]
        var anyLabel: Node?
        /// Subscribers whose pattern ends here, each peer once.
        var terminal: [Subscriber] = []
        /// Subscribers whose pattern ends here with `>`, each peer once.
        var rest: [Subscriber] = []

        var isEmpty: Bool { literal.isEmpty && anyLabel == nil && terminal.isEmpty && rest.isEmpty }
    }

    /// One step of a pattern's path through the trie.
    private enum Step {
        case literal(LabelKey)
        case anyLabel
        case rest
    }

    private let root = Node()
    private(set) var count = 0
    /// Nodes below the root: the trie's memory, and the most a match can visit.
    private(set) var nodeCount = 0
    /// Nodes visited by matches so far (for the tests that bound a match's work).
    private(set) var nodesVisited = 0

    /// What adding `pattern` can cost: the nodes it can create, one per label (a `>` ends at its parent).
    /// Charged to the subscriber's user (`pattern-labels-per-uid`), since a match visits each node at most once.
    static func cost(of pattern: NotificationPattern) -> Int {
        steps(of: pattern).reduce(0) { count, step in
            if case .rest = step { count } else { count + 1 }
        }
    }

    /// The pattern's labels as the trie sees them. `NotificationPattern` splits on the *character* `.`, so a
    /// literal such as "a.\u{301}b" (a `.` followed by a combining mark is one character) is one label there but
    /// two in the name grammar; splitting literals again on the byte keeps the trie consistent with how
    /// `forEachMatch(name:)` splits names.
    private static func steps(of pattern: NotificationPattern) -> [Step] {
        var steps: [Step] = []
        steps.reserveCapacity(pattern.labels.count)
        for label in pattern.labels {
            switch label {
            case .literal(let text):
                for part in text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false) {
                    steps.append(.literal(LabelKey(String(decoding: part, as: UTF8.self))))
                }
            case .anyLabel:
                steps.append(.anyLabel)
            case .rest:
                steps.append(.rest)
            }
        }
        return steps
    }

    /// Adds `subscriber` under `pattern`, or replaces its peer's entry there (another subscription of the peer
    /// with the same pattern became the strongest). `isNew`: the peer has no entry there yet (no search needed).
    func set(_ pattern: NotificationPattern, _ subscriber: Subscriber, isNew: Bool = false) {
        var node = root
        for step in Self.steps(of: pattern) {
            switch step {
            case .literal(let key):
                if let next = node.literal[key] {
                    node = next
                } else {
                    let next = Node()
                    node.literal[key] = next
                    nodeCount += 1
                    node = next
                }
            case .anyLabel:
                if node.anyLabel == nil {
                    node.anyLabel = Node()
                    nodeCount += 1
                }
                node = node.anyLabel!
            case .rest:
                Self.set(subscriber, in: &node.rest, isNew: isNew, count: &count)
                return
            }
        }
        Self.set(subscriber, in: &node.terminal, isNew: isNew, count: &count)
    }

    private static func set(_ subscriber: Subscriber, in entries: inout [Subscriber], isNew: Bool, count: inout Int) {
        if !isNew, let index = entries.firstIndex(where: { $0.peer === subscriber.peer }) {
            entries[index] = subscriber
        } else {
            entries.append(subscriber)
            count += 1
        }
    }

    private static func remove(_ peer: Peer, from entries: inout [Subscriber], count: inout Int) {
        guard let index = entries.firstIndex(where: { $0.peer === peer }) else { return }
        entries.remove(at: index)
        count -= 1
    }

    /// Removes `peer`'s entry under `pattern`.
    func remove(_ pattern: NotificationPattern, _ peer: Peer) {
        _ = remove(Self.steps(of: pattern)[...], peer, from: root)
    }

    /// Removes one entry; returns whether `node` became empty (so the parent can drop it).
    private func remove(_ steps: ArraySlice<Step>, _ peer: Peer, from node: Node) -> Bool {
        guard let step = steps.first else {
            Self.remove(peer, from: &node.terminal, count: &count)
            return node.isEmpty
        }
        switch step {
        case .rest:
            Self.remove(peer, from: &node.rest, count: &count)
        case .anyLabel:
            if let child = node.anyLabel, remove(steps.dropFirst(), peer, from: child) {
                node.anyLabel = nil
                nodeCount -= 1
            }
        case .literal(let key):
            if let child = node.literal[key], remove(steps.dropFirst(), peer, from: child) {
                node.literal.removeValue(forKey: key)
                nodeCount -= 1
            }
        }
        return node.isEmpty
    }

    /// Calls `body` for every subscriber with a pattern matching `name` (once per matching pattern).
    ///
    /// Allocation-free: labels are found in place in the name's UTF-8 and looked up with borrowed keys.
    func forEachMatch(name: String, _ body: (Subscriber) -> Void) {
        // A daemon without patterns pays nothing per post, whatever the caller checked before.
        if count == 0 { return }
        var name = name
        name.withUTF8 { bytes in
            walk(from: root, UnsafeRawBufferPointer(bytes), labelStart: 0, body)
        }
    }

    /// Visits the matches below `start` for the labels of `name` from byte `labelStart` on.
    ///
    /// Iterative along one branch; it recurses only where a node has both a literal child for the label and a
    /// `*` child, so the depth is bounded by the number of labels and the common single-branch case makes no
    /// calls. `labelStart == name.count + 1` means every label has been consumed (`name.count` itself is the
    /// start of an empty last label, as in "a.").
    private func walk(
        from start: Node, _ name: UnsafeRawBufferPointer, labelStart: Int, _ body: (Subscriber) -> Void
    ) {
        // Strong, not unowned(unsafe): a caller's `body` could remove patterns (it only collects today), which may
        // free nodes on this path while we are still walking it.
        var node = start
        var labelStart = labelStart
        while labelStart <= name.count {
            // Checking first skips copying (retaining) the empty array on every label.
            if !node.rest.isEmpty {
                for subscriber in node.rest { body(subscriber) }
            }
            var labelEnd = labelStart
            while labelEnd < name.count, name[labelEnd] != UInt8(ascii: ".") { labelEnd += 1 }
            let next = labelEnd + 1

            nodesVisited &+= 1
            // No hashing at all for nodes that only have wildcard children.
            let literalChild =
                node.literal.isEmpty
                ? nil : node.literal[.probe(UnsafeRawBufferPointer(rebasing: name[labelStart..<labelEnd]))]
            if let anyChild = node.anyLabel {
                if let literalChild { walk(from: literalChild, name, labelStart: next, body) }
                node = anyChild
            } else if let literalChild {
                node = literalChild
            } else {
                // Also the fast exit at the root when nothing there can match the first label.
                return
            }
            labelStart = next
        }
        nodesVisited &+= 1
        if !node.terminal.isEmpty {
            for subscriber in node.terminal { body(subscriber) }
        }
    }
}

/// A label compared and hashed byte for byte (see `ExactName`).
///
/// Stored keys own their bytes; `probe` keys borrow the bytes of the name being matched so that a lookup
/// creates no String. A probe is valid only while its buffer is, so it must only ever be used to look up,
/// never be stored in a dictionary. Both kinds hash the same bytes the same way, so they find each other.
enum LabelKey: Hashable {
    case stored(String)
    case probe(UnsafeRawBufferPointer)

    init(_ label: String) {
        // A native (or small) string always has contiguous UTF-8, so `withBytes` takes its fast path.
        var label = label
        label.makeContiguousUTF8()
        self = .stored(label)
    }

    @inline(__always)
    private func withBytes<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        switch self {
        case .probe(let bytes):
            return body(bytes)
        case .stored(let label):
            if let result = label.utf8.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) {
                return result
            }
            var label = label
            return label.withUTF8 { body(UnsafeRawBufferPointer($0)) }
        }
    }

    static func == (lhs: LabelKey, rhs: LabelKey) -> Bool {
        lhs.withBytes { left in
            rhs.withBytes { right in
                guard left.count == right.count else { return false }
                guard left.count > 0, let l = left.baseAddress, let r = right.baseAddress else { return true }
                return memcmp(l, r, left.count) == 0
            }
        }
    }

    func hash(into hasher: inout Hasher) {
        withBytes { hasher.combine(bytes: $0) }
        // Keeps the encoding prefix-free should a key ever be hashed as part of a larger value.
        hasher.combine(0xFF as UInt8)
    }
}
