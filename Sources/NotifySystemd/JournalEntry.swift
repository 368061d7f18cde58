import Logging

/// The fields of one journal entry for one log event. Building them is a pure function of the event, so it is
/// tested without a journal (`sd_journal_sendv` reports success even when no journal is listening).
///
/// Fields, in order:
/// - `MESSAGE`: the message; with ``includesMetadataInMessage``, followed by ` (key=value …)` with the
///   metadata sorted by key, so that `journalctl` shows it without `-o verbose`.
/// - `PRIORITY`: the ``SyslogPriority`` of the level, in decimal.
/// - `SYSLOG_IDENTIFIER`: the program name (`journalctl -t notifyd`).
/// - `CODE_FILE`, `CODE_LINE`, `CODE_FUNC`: where the event was logged.
/// - `LOGGER`: the logger's label.
/// - `ERROR`: the event's error, when it has one.
/// - one field per metadata key, sorted by key, named by ``JournalFieldName/make(from:)``; nested
///   dictionaries are flattened (`request: [id: 7]` → `REQUEST_ID=7`). A name that is already taken (by a field
///   above, e.g. metadata `message`, or by another key that maps to the same name) gets a `_2`, `_3` … suffix.
package struct JournalEntry: Sendable, Hashable {
    /// The fields in the order they are sent.
    package var fields: [JournalField]

    /// Whether `MESSAGE` repeats the metadata (the default for ``JournalLogHandler``).
    package var includesMetadataInMessage: Bool

    /// Builds the fields of one log event.
    package init(
        level: Logger.Level, message: String, metadata: Logger.Metadata, identifier: String, label: String,
        file: String, function: String, line: UInt, error: (any Error)? = nil,
        includesMetadataInMessage: Bool = true
    ) {
        self.includesMetadataInMessage = includesMetadataInMessage
        let flattened = Self.flatten(metadata)
        var text = message
        if includesMetadataInMessage, !flattened.isEmpty {
            text += " (" + flattened.map { "\($0.key)=\($0.value)" }.joined(separator: " ") + ")"
        }
        var fields = [
            JournalField(name: "MESSAGE", text: text),
            JournalField(name: "PRIORITY", text: "\(SyslogPriority(level).rawValue)"),
            JournalField(name: "SYSLOG_IDENTIFIER", text: identifier),
            JournalField(name: "CODE_FILE", text: file),
            JournalField(name: "CODE_LINE", text: "\(line)"),
            JournalField(name: "CODE_FUNC", text: function),
            JournalField(name: "LOGGER", text: label),
        ]
        if let error { fields.append(JournalField(name: "ERROR", text: "\(error)")) }
        var used = Set(fields.map(\.name))
        for (key, value) in flattened {
            fields.append(JournalField(name: JournalFieldName.unique(JournalFieldName.make(from: key), in: &used), text: value))
        }
        self.fields = fields
    }

    /// The value of the first field named `name`, as text (for tests and diagnostics).
    package subscript(name: String) -> String? {
        fields.first { $0.name == name }?.text
    }

    /// Metadata as `(dotted key, text)` pairs sorted by key; dictionaries become one pair per leaf.
    static func flatten(_ metadata: Logger.Metadata) -> [(key: String, value: String)] {
        var result: [(key: String, value: String)] = []
        func visit(_ key: String, _ value: Logger.MetadataValue) {
            switch value {
            case .dictionary(let nested) where !nested.isEmpty:
                for (subkey, subvalue) in nested { visit(key + "." + subkey, subvalue) }
            default:
                result.append((key, value.description))
            }
        }
        for (key, value) in metadata { visit(key, value) }
        return result.sorted { $0.key < $1.key }
    }
}
