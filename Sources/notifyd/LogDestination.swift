import ArgumentParser
import Logging
import NotifySystemd

/// Where the daemon's log goes (`--log`).
enum LogDestination: String, CaseIterable, ExpressibleByArgument, Sendable {
    /// Plain text lines on standard error.
    case stderr
    /// Structured entries in the systemd journal (`sd_journal_sendv`).
    case journal
    /// The journal when standard error is connected to it (`JOURNAL_STREAM`, set by systemd for services), standard
    /// error otherwise.
    case auto

    /// `auto` resolved for this process.
    func resolved(environment: [String: String]) -> LogDestination {
        guard self == .auto else { return self }
        return JournalStream.isStandardErrorConnectedToJournal(environment: environment) ? .journal : .stderr
    }

    /// Installs the process-wide log handler: this destination, at `level`, behind the rate limiter.
    func bootstrap(level: Logger.Level, limiter: LogRateLimiter, identifier: String = "notifyd") {
        let destination = self
        LoggingSystem.bootstrap { label in
            var upstream: any LogHandler =
                destination == .journal
                ? JournalLogHandler(label: label, identifier: identifier)
                : StreamLogHandler.standardError(label: label)
            upstream.logLevel = level
            return RateLimitedLogHandler(upstream: upstream, limiter: limiter)
        }
    }
}
