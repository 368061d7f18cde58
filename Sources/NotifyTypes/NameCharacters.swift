/// Which Unicode scalars a label of a notification name may hold (`protocol/PROTOCOL.md` § 8): shared by the name
/// grammar (NotifyWire's `NotificationName`) and by ``NameError``'s descriptions, which show a character only when
/// it is visible.
package enum NameCharacters {
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

    /// Whether `scalar` may appear in a label: ASCII letters and digits, `-`, `_`, `:`, `@`, `+`, `=`, or a
    /// scalar at or above U+00A0 outside ``invisibleRanges``.
    @inlinable
    package static func isAllowedInLabel(_ scalar: Unicode.Scalar) -> Bool {
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
