import NotifyWire

/// Why a string is not a valid notification name or pattern (``NotifyError/invalidName(_:)``).
public enum NameError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The name is the empty string.
    case empty
    /// The name is longer than the limit, in UTF-8 bytes.
    case tooLong(name: String, length: Int, limit: Int)
    /// Label number `index` (counting from 0) is empty: a leading, trailing or doubled `.`.
    case emptyLabel(name: String, index: Int)
    /// The name contains a character the grammar does not allow.
    case invalidCharacter(name: String, character: Unicode.Scalar)
    /// A pattern uses `>` somewhere other than as its last label.
    case misplacedRest(pattern: String)

    /// A sentence for people naming the problem, with the name's invisible characters escaped.
    public var description: String { wire.description }

    /// The wire protocol's reading of the same problem.
    init(_ wire: NotifyWire.NameError) {
        switch wire {
        case .empty: self = .empty
        case .tooLong(let name, let length, let limit): self = .tooLong(name: name, length: length, limit: limit)
        case .emptyLabel(let name, let index): self = .emptyLabel(name: name, index: index)
        case .invalidCharacter(let name, let character): self = .invalidCharacter(name: name, character: character)
        case .misplacedRest(let pattern): self = .misplacedRest(pattern: pattern)
        }
    }

    /// The same problem in the wire protocol's terms.
    var wire: NotifyWire.NameError {
        switch self {
        case .empty: .empty
        case .tooLong(let name, let length, let limit): .tooLong(name: name, length: length, limit: limit)
        case .emptyLabel(let name, let index): .emptyLabel(name: name, index: index)
        case .invalidCharacter(let name, let character): .invalidCharacter(name: name, character: character)
        case .misplacedRest(let pattern): .misplacedRest(pattern: pattern)
        }
    }
}
