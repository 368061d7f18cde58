/// A subscription pattern: a name whose labels may be wildcards (`protocol/PROTOCOL.md` § 8.1).
///
/// `*` stands for exactly one label and may appear anywhere; `>` stands for one or more trailing labels and
/// may only be the last label. A pattern without wildcards matches exactly one name.
package struct NotificationPattern: Sendable, Hashable, CustomStringConvertible {
    /// One label of a pattern.
    package enum Label: Sendable, Hashable {
        /// A literal label.
        case literal(Substring)
        /// `*`: any one label.
        case anyLabel
        /// `>`: one or more labels; only last.
        case rest
    }

    /// The pattern as written.
    package let text: String
    /// Its labels.
    package let labels: [Label]

    /// Whether the pattern contains `*` or `>`.
    package var hasWildcards: Bool {
        labels.contains { if case .literal = $0 { false } else { true } }
    }

    /// Parses and validates a pattern.
    ///
    /// - Throws: ``NameError`` if it breaks the grammar.
    package init(_ text: String, maxLength: Int = NotificationName.maxLength) throws(NameError) {
        if !Self.mayHaveWildcards(text) {
            // A name: the grammar checks it as it is.
            try NotificationName.validate(text, maxLength: maxLength)
            self.text = text
            self.labels = Self.labels(of: text).map { .literal($0) }
            return
        }
        // Wildcard labels are replaced by a placeholder label so the name grammar checks everything else.
        var placeholderName = ""
        var labels: [Label] = []
        let parts = Self.labels(of: text)
        for (index, part) in parts.enumerated() {
            if index > 0 { placeholderName += "." }
            switch part {
            case "*":
                labels.append(.anyLabel)
                placeholderName += "x"
            case ">":
                guard index == parts.count - 1 else { throw NameError.misplacedRest(pattern: text) }
                labels.append(.rest)
                placeholderName += "x"
            default:
                labels.append(.literal(part))
                placeholderName += part
            }
        }
        do {
            try NotificationName.validate(placeholderName, maxLength: maxLength)
        } catch .invalidCharacter(_, let character) {
            throw NameError.invalidCharacter(name: text, character: character)
        } catch .emptyLabel(_, let index) {
            throw NameError.emptyLabel(name: text, index: index)
        } catch .tooLong(_, let length, let limit) {
            throw NameError.tooLong(name: text, length: length, limit: limit)
        } catch {
            throw error
        }
        if text.utf8.count > maxLength { throw NameError.tooLong(name: text, length: text.utf8.count, limit: maxLength) }
        self.text = text
        self.labels = labels
    }

    /// Whether `name` (a valid name) matches the pattern.
    package func matches(_ name: String) -> Bool {
        var nameLabels = Self.labels(of: name)[...]
        for label in labels {
            switch label {
            case .rest:
                return !nameLabels.isEmpty
            case .anyLabel:
                guard nameLabels.popFirst() != nil else { return false }
            case .literal(let literal):
                guard let next = nameLabels.popFirst(), next.bytesEqual(literal) else { return false }
            }
        }
        return nameLabels.isEmpty
    }

    /// The literal labels before the first wildcard, joined by `.` (empty when the pattern starts with one).
    package var literalPrefix: String {
        var parts: [Substring] = []
        for label in labels {
            guard case .literal(let literal) = label else { break }
            parts.append(literal)
        }
        return parts.joined(separator: ".")
    }

    /// How this reads in logs and error messages.
    package var description: String { text }

    /// Checks `text` against the pattern grammar, as ``init(_:maxLength:)`` does, without building its labels.
    ///
    /// - Throws: ``NameError`` if it breaks the grammar.
    package static func validate(_ text: String, maxLength: Int = NotificationName.maxLength) throws(NameError) {
        if mayHaveWildcards(text) {
            _ = try Self(text, maxLength: maxLength)
        } else {
            try NotificationName.validate(text, maxLength: maxLength)
        }
    }

    /// Whether `text` holds a `*` or `>` anywhere (a valid name holds neither).
    package static func mayHaveWildcards(_ text: String) -> Bool {
        text.utf8.contains { $0 == UInt8(ascii: "*") || $0 == UInt8(ascii: ">") }
    }

    /// The labels of a name or pattern: split at every `.` scalar, as the name grammar and the daemon's pattern
    /// index do (a `Character` split would keep a `.` followed by a combining mark inside a label).
    static func labels(of text: String) -> [Substring] {
        text.unicodeScalars.split(separator: ".", omittingEmptySubsequences: false).map { Substring($0) }
    }
}
