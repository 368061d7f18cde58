/// Why a string is not a valid notification name or pattern (the `Notify` library throws it as
/// `NotifyError.invalidName(_:)`).
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
    public var description: String {
        switch self {
        case .empty:
            return "invalid name: the name is empty"
        case .tooLong(let name, let length, let limit):
            return "invalid name '\(Self.escaped(String(name.prefix(40))))…': \(length) bytes is longer than the limit of \(limit)"
        case .emptyLabel(let name, let index):
            return "invalid name '\(Self.escaped(name))': label \(index + 1) is empty (leading, trailing or doubled '.')"
        case .misplacedRest(let pattern):
            return "invalid pattern '\(Self.escaped(pattern))': '>' may only be the last label"
        case .invalidCharacter(let name, let character):
            let code = "U+" + String(character.value, radix: 16, uppercase: true)
            // Show the character itself only when it is visible; otherwise only its code point.
            let printable = (0x21...0x7E).contains(character.value)
                || (character.value >= 0xA0 && NameCharacters.isAllowedInLabel(character))
            let shown = printable ? "'\(character)' (\(code))" : code
            return "invalid name '\(Self.escaped(name))': character \(shown) is not allowed"
                + " (use letters, digits, '-', '_', ':', '@', '+', '=' and '.' between labels)"
        }
    }

    /// `name` with control and invisible characters written as `\u{XXXX}`, so messages stay one readable line.
    package static func escaped(_ name: String) -> String {
        var result = ""
        for scalar in name.unicodeScalars {
            let visible = (0x20...0x7E).contains(scalar.value)
                || (scalar.value >= 0xA0 && NameCharacters.isAllowedInLabel(scalar))
            if visible {
                result.unicodeScalars.append(scalar)
            } else {
                result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            }
        }
        return result
    }
}
