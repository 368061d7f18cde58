/// One field of a journal entry: a valid field name and its value, as raw bytes.
///
/// Values are binary-safe: they may contain newlines, NUL bytes or bytes that are not UTF-8, because
/// ``JournalWriter`` hands each field to `sd_journal_sendv(3)` as one `iovec` with an explicit length (libsystemd
/// switches to the journal's binary-safe encoding for values with newlines).
package struct JournalField: Sendable, Hashable, CustomStringConvertible {
    /// The field name; always valid (see ``JournalFieldName/isValid(_:)``).
    package let name: String
    /// The value bytes, unchanged.
    package let value: [UInt8]

    /// Creates a field with a name that is already valid.
    ///
    /// - Precondition: `JournalFieldName.isValid(name)`.
    package init(name: String, value: [UInt8]) {
        precondition(JournalFieldName.isValid(name), "invalid journal field name '\(name)'")
        self.name = name
        self.value = value
    }

    /// Creates a field whose value is the UTF-8 encoding of `text`.
    package init(name: String, text: String) {
        self.init(name: name, value: Array(text.utf8))
    }

    /// The value as text (invalid UTF-8 repaired), for tests and diagnostics.
    package var text: String { String(decoding: value, as: UTF8.self) }

    /// `NAME=value`, the bytes of one `iovec` for `sd_journal_sendv`.
    package var assignment: [UInt8] { Array(name.utf8) + [UInt8(ascii: "=")] + value }

    /// How this reads in logs and error messages.
    package var description: String { "\(name)=\(text)" }
}
