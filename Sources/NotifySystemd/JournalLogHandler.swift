import Logging

/// A swift-log `LogHandler` that writes structured entries to the systemd journal (see ``JournalEntry`` for the
/// fields).
///
/// ```swift
/// LoggingSystem.bootstrap { label in JournalLogHandler(label: label, identifier: "notifyd") }
/// ```
///
/// Choose it when ``JournalStream/isStandardErrorConnectedToJournal(environment:)`` says so, that is when a
/// service manager connected the standard error to the journal.
package struct JournalLogHandler: LogHandler {
    /// Receives the fields of each entry; ``JournalWriter/send(_:)`` unless a test replaces it.
    package typealias Sink = @Sendable ([JournalField]) -> Void

    /// The logger's label, sent as `LOGGER`.
    package let label: String
    /// The program name, sent as `SYSLOG_IDENTIFIER`.
    package let identifier: String
    /// Whether `MESSAGE` repeats the metadata (see ``JournalEntry``).
    package var includesMetadataInMessage: Bool
    /// Events below this level are not logged.
    package var logLevel: Logger.Level = .info
    /// Metadata added to every entry of this handler.
    package var metadata: Logger.Metadata = [:]
    /// Contextual metadata added to every entry (for example from task-local values).
    package var metadataProvider: Logger.MetadataProvider?
    private let sink: Sink

    /// Creates a handler.
    ///
    /// - Parameters:
    ///   - label: the logger's label.
    ///   - identifier: the program name for `SYSLOG_IDENTIFIER`.
    ///   - metadataProvider: adds contextual metadata to every entry.
    ///   - includesMetadataInMessage: repeat the metadata at the end of `MESSAGE`.
    ///   - sink: where the fields go; the journal by default.
    package init(
        label: String, identifier: String, metadataProvider: Logger.MetadataProvider? = nil,
        includesMetadataInMessage: Bool = true, sink: @escaping Sink = { JournalWriter.send($0) }
    ) {
        self.label = label
        self.identifier = identifier
        self.metadataProvider = metadataProvider
        self.includesMetadataInMessage = includesMetadataInMessage
        self.sink = sink
    }

    /// One metadata value of this handler.
    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes one entry: handler, provider and event metadata merged (the event's win), as ``JournalEntry``
    /// fields.
    package func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let eventMetadata = event.metadata { merged.merge(eventMetadata) { _, new in new } }
        let entry = JournalEntry(
            level: event.level, message: event.message.description, metadata: merged, identifier: identifier,
            label: label, file: event.file, function: event.function, line: event.line, error: event.error,
            includesMetadataInMessage: includesMetadataInMessage)
        sink(entry.fields)
    }
}
