import Logging

/// Wraps a `LogHandler` and drops repetitions of the same event beyond a ``LogRateLimiter``'s budget.
///
/// Events are keyed by level and message text; metadata (connection, pid, reason…) does not count, so that a
/// flood of "protocol error" events from many connections is limited as one. When an event is admitted after
/// some were suppressed, a `repeated log messages suppressed` event with metadata `suppressed` (the count) and
/// `suppressed_message` is logged before it; ``logSuppressedSummaries(to:)`` reports keys that went quiet.
package struct RateLimitedLogHandler: LogHandler {
    /// The message of the summary events.
    package static let summaryMessage = "repeated log messages suppressed"

    /// The handler that receives admitted events.
    package var upstream: any LogHandler
    /// The shared budget (one limiter for every logger of the process).
    package let limiter: LogRateLimiter

    /// Creates a handler that forwards admitted events to `upstream`.
    package init(upstream: any LogHandler, limiter: LogRateLimiter) {
        self.upstream = upstream
        self.limiter = limiter
    }

    /// The upstream handler's level.
    package var logLevel: Logger.Level {
        get { upstream.logLevel }
        set { upstream.logLevel = newValue }
    }

    /// The upstream handler's metadata.
    package var metadata: Logger.Metadata {
        get { upstream.metadata }
        set { upstream.metadata = newValue }
    }

    /// The upstream handler's metadata provider.
    package var metadataProvider: Logger.MetadataProvider? {
        get { upstream.metadataProvider }
        set { upstream.metadataProvider = newValue }
    }

    /// One metadata value of the upstream handler.
    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { upstream[metadataKey: key] }
        set { upstream[metadataKey: key] = newValue }
    }

    /// Forwards the event if the limiter admits it (after a summary of what it suppressed before).
    package func log(event: LogEvent) {
        let text = event.message.description
        switch limiter.admit(Self.key(level: event.level, message: text)) {
        case .suppress:
            return
        case .log(let suppressed):
            if suppressed > 0 {
                upstream.log(event: Self.summary(level: event.level, message: text, count: suppressed, like: event))
            }
            upstream.log(event: event)
        }
    }

    /// Logs one summary event to `logger` per key that suppressed events since its last report.
    package static func logSuppressedSummaries(from limiter: LogRateLimiter, to logger: Logger) {
        for summary in limiter.drainSummaries() {
            let (level, message) = parse(summary.key)
            logger.log(
                level: level, "\(summaryMessage)",
                metadata: ["suppressed": "\(summary.suppressed)", "suppressed_message": "\(message)"])
        }
    }

    /// The key of an event: its level and message.
    static func key(level: Logger.Level, message: String) -> String {
        "\(level.rawValue)|\(message)"
    }

    private static func parse(_ key: String) -> (Logger.Level, String) {
        guard let separator = key.firstIndex(of: "|") else { return (.notice, key) }
        let level = Logger.Level(rawValue: String(key[..<separator])) ?? .notice
        return (level, String(key[key.index(after: separator)...]))
    }

    private static func summary(level: Logger.Level, message: String, count: Int, like event: LogEvent) -> LogEvent {
        LogEvent(
            level: level, message: "\(summaryMessage)",
            metadata: ["suppressed": "\(count)", "suppressed_message": "\(message)"],
            source: nil, file: event.file, function: event.function, line: event.line)
    }
}
