/// The notification name grammar (protocol v1, `protocol/PROTOCOL.md` § Names).
///
/// A name is 1 to 255 bytes of UTF-8 made of labels separated by `.`. Every label is non-empty and
/// consists of ASCII letters and digits, `-`, `_`, `:`, `@`, `+`, `=`, or any Unicode scalar at or above
/// U+00A0 except the invisible ones in ``invisibleRanges`` (spaces, zero-width and bidirectional controls,
/// noncharacters). Everything else, notably white space, control characters, `/`, `*` and `>` (reserved
/// for patterns), is rejected.
package enum NotificationName {
    /// The prefix of names that never leave the posting process.
    package static let processLocalPrefix = "self."
    private static let processLocalPrefixBytes = Array(processLocalPrefix.utf8)

    /// The longest name the grammar allows, in UTF-8 bytes (a daemon may announce a lower limit).
    package static let maxLength = 255

    /// Checks `name` against the grammar.
    ///
    /// - Parameter maxLength: the longest name accepted, in UTF-8 bytes.
    /// - Throws: ``NameError`` describing the first problem found.
    package static func validate(_ name: String, maxLength: Int = NotificationName.maxLength) throws(NameError) {
        var utf8Count = 0
        var labelLength = 0
        var labelIndex = 0
        for scalar in name.unicodeScalars {
            utf8Count += UTF8.width(scalar)
            if scalar == "." {
                if labelLength == 0 { throw NameError.emptyLabel(name: name, index: labelIndex) }
                labelIndex += 1
                labelLength = 0
                continue
            }
            guard isAllowedInLabel(scalar) else {
                throw NameError.invalidCharacter(name: name, character: scalar)
            }
            labelLength += 1
        }
        if utf8Count == 0 { throw NameError.empty }
        if labelLength == 0 { throw NameError.emptyLabel(name: name, index: labelIndex) }
        if utf8Count > maxLength { throw NameError.tooLong(name: name, length: utf8Count, limit: maxLength) }
    }

    /// Whether `name` is valid according to ``validate(_:maxLength:)``.
    package static func isValid(_ name: String, maxLength: Int = NotificationName.maxLength) -> Bool {
        do {
            try validate(name, maxLength: maxLength)
            return true
        } catch {
            return false
        }
    }

    /// Whether `name` is process-local (starts with `self.`): such names never reach a daemon.
    package static func isProcessLocal(_ name: String) -> Bool {
        // Over the contiguous UTF-8 (native strings already are) rather than the generic UTF8View: this runs on
        // every post.
        var name = name
        return name.withUTF8 { $0.starts(with: processLocalPrefixBytes) }
    }

    /// Scalars at or above U+00A0 that are still rejected, because they are invisible or ambiguous and would
    /// let two names that look the same differ. A fixed list, so that every implementation agrees whatever its
    /// Unicode version (`protocol/PROTOCOL.md` § 8).
    package static let invisibleRanges: [ClosedRange<UInt32>] = [
        0x00A0...0x00A0,  // no-break space
        0x00AD...0x00AD,  // soft hyphen
        0x1680...0x1680,  // ogham space mark
        0x180E...0x180E,  // Mongolian vowel separator
        0x2000...0x200F,  // spaces, zero-width space/joiners, LRM, RLM
        0x2028...0x202F,  // line/paragraph separators, bidi embeddings and overrides, narrow no-break space
        0x205F...0x206F,  // medium space, word joiner, invisible operators, bidi isolates
        0x3000...0x3000,  // ideographic space
        0xFDD0...0xFDEF,  // noncharacters
        0xFEFF...0xFEFF,  // zero-width no-break space (byte order mark)
        0xFFF0...0xFFFF,  // specials, replacement character, noncharacters
        0xE0000...0xE007F,  // tags
    ]

    @inline(__always)
    static func isAllowedInLabel(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        switch value {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true  // 0-9 A-Z a-z
        case 0x2D, 0x5F, 0x3A, 0x40, 0x2B, 0x3D: return true  // - _ : @ + =
        case 0xA0...:
            if value & 0xFFFE == 0xFFFE { return false }  // U+nFFFE and U+nFFFF are noncharacters
            for range in invisibleRanges where range.contains(value) { return false }
            return true
        default: return false
        }
    }
}

/// Why a string is not a valid notification name.
package enum NameError: Error, Sendable, Hashable, CustomStringConvertible {
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

    /// How this reads in logs and error messages.
    package var description: String {
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
                || (character.value >= 0xA0 && NotificationName.isAllowedInLabel(character))
            let shown = printable ? "'\(character)' (\(code))" : code
            return "invalid name '\(Self.escaped(name))': character \(shown) is not allowed"
                + " (use letters, digits, '-', '_', ':', '@', '+', '=' and '.' between labels)"
        }
    }

    /// `name` with control and invisible characters written as `\u{XXXX}`, so messages stay one readable line.
    static func escaped(_ name: String) -> String {
        var result = ""
        for scalar in name.unicodeScalars {
            let visible = (0x20...0x7E).contains(scalar.value)
                || (scalar.value >= 0xA0 && NotificationName.isAllowedInLabel(scalar))
            if visible {
                result.unicodeScalars.append(scalar)
            } else {
                result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            }
        }
        return result
    }
}
