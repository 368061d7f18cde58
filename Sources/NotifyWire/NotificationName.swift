/// The notification name grammar (protocol v1, `protocol/PROTOCOL.md` § Names).
///
/// A name is 1 to 255 bytes of UTF-8 made of labels separated by `.`. Every label is non-empty and
/// consists of ASCII letters and digits, `-`, `_`, `:`, `@`, `+`, `=`, or any Unicode scalar at or above
/// U+00A0 except the invisible ones in `NameCharacters.invisibleRanges` (spaces, zero-width and bidirectional controls,
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
            guard NameCharacters.isAllowedInLabel(scalar) else {
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

}
