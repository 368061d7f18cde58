import NotifyWire

/// Pattern subscriptions indexed by label, so matching a name walks only the branches its labels select: the
/// cost does not grow with the number of patterns that cannot match.
final class PatternTrie {
    final class Node {
        var literal: [LabelKey: Node] = [:]
        var anyLabel: Node?
        /// Connections whose pattern ends here.
        var terminal: [ClientConnection] = []
        /// Connections whose pattern ends here with `>`.
        var rest: [ClientConnection] = []

        var isEmpty: Bool { literal.isEmpty && anyLabel == nil && terminal.isEmpty && rest.isEmpty }
    }

    private let root = Node()
    private(set) var count = 0

    func insert(_ pattern: NotificationPattern, _ connection: ClientConnection) {
        var node = root
        for label in pattern.labels {
            switch label {
            case .literal(let text):
                if let next = node.literal[LabelKey(text)] {
                    node = next
                } else {
                    let next = Node()
                    node.literal[LabelKey(text)] = next
                    node = next
                }
            case .anyLabel:
                if node.anyLabel == nil { node.anyLabel = Node() }
                node = node.anyLabel!
            case .rest:
                node.rest.append(connection)
                count += 1
                return
            }
        }
        node.terminal.append(connection)
        count += 1
    }

    func remove(_ pattern: NotificationPattern, _ connection: ClientConnection) {
        _ = remove(pattern.labels[...], connection, from: root)
    }

    /// Removes one entry; returns whether `node` became empty (so the parent can drop it).
    private func remove(_ labels: ArraySlice<NotificationPattern.Label>, _ connection: ClientConnection, from node: Node) -> Bool {
        guard let label = labels.first else {
            if let index = node.terminal.firstIndex(where: { $0 === connection }) {
                node.terminal.remove(at: index)
                count -= 1
            }
            return node.isEmpty
        }
        switch label {
        case .rest:
            if let index = node.rest.firstIndex(where: { $0 === connection }) {
                node.rest.remove(at: index)
                count -= 1
            }
        case .anyLabel:
            if let child = node.anyLabel, remove(labels.dropFirst(), connection, from: child) { node.anyLabel = nil }
        case .literal(let text):
            if let child = node.literal[LabelKey(text)], remove(labels.dropFirst(), connection, from: child) {
                node.literal.removeValue(forKey: LabelKey(text))
            }
        }
        return node.isEmpty
    }

    /// Calls `body` for every connection with a pattern matching `labels` (once per matching pattern).
    func forEachMatch(_ labels: [Substring], _ body: (ClientConnection) -> Void) {
        visit(root, labels[...], body)
    }

    private func visit(_ node: Node, _ labels: ArraySlice<Substring>, _ body: (ClientConnection) -> Void) {
        guard let label = labels.first else {
            for connection in node.terminal { body(connection) }
            return
        }
        for connection in node.rest { body(connection) }
        let remaining = labels.dropFirst()
        if let child = node.literal[LabelKey(label)] { visit(child, remaining, body) }
        if let child = node.anyLabel { visit(child, remaining, body) }
    }
}

/// A label compared byte for byte (see `ExactName`), without copying it out of the name.
struct LabelKey: Hashable {
    let label: Substring

    init(_ label: Substring) { self.label = label }

    static func == (lhs: LabelKey, rhs: LabelKey) -> Bool {
        lhs.label.utf8.elementsEqual(rhs.label.utf8)
    }

    func hash(into hasher: inout Hasher) {
        let hashed: Void? = label.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil {
            for byte in label.utf8 { hasher.combine(byte) }
        }
        hasher.combine(0xFF as UInt8)
    }
}
