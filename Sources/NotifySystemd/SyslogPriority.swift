import Logging

/// The syslog priority of a journal entry (its `PRIORITY` field), from `emergency` (0) to `debug` (7).
package enum SyslogPriority: Int, Sendable, Hashable, CaseIterable {
    case emergency = 0
    case alert = 1
    case critical = 2
    case error = 3
    case warning = 4
    case notice = 5
    case info = 6
    case debug = 7

    /// The priority for a swift-log level. `trace` and `debug` both map to `debug`, the lowest priority; swift-log
    /// has no `alert` or `emergency`.
    package init(_ level: Logger.Level) {
        switch level {
        case .trace, .debug: self = .debug
        case .info: self = .info
        case .notice: self = .notice
        case .warning: self = .warning
        case .error: self = .error
        case .critical: self = .critical
        }
    }
}
