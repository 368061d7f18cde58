import Logging
import NotifySystemd
import Synchronization
import Testing

@Suite("Rate-limited log handler")
struct RateLimitedLogHandlerTests {
    /// Records events as `level message {metadata}`.
    struct Recorder: LogHandler {
        let box: Box
        final class Box: Sendable { let lines = Mutex<[String]>([]) }
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        init(box: Box) {
            self.box = box
        }

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
            let text = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            box.lines.withLock { $0.append("\(event.level) \(event.message) {\(text)}") }
        }
    }

    @Test("repetitions beyond the budget are dropped and summarised; other messages pass")
    func limitsAndSummarises() {
        let box = Recorder.Box()
        let limiter = LogRateLimiter(policy: .init(burst: 2, refillPerSecond: 0))
        var logger = Logger(label: "test") { _ in RateLimitedLogHandler(upstream: Recorder(box: box), limiter: limiter) }
        logger.logLevel = .trace
        for connection in 1...5 {
            logger.notice("protocol error, closing connection", metadata: ["connection": "\(connection)"])
        }
        logger.info("something else")
        #expect(box.lines.withLock { $0 } == [
            "notice protocol error, closing connection {connection=1}",
            "notice protocol error, closing connection {connection=2}",
            "info something else {}",
        ])

        RateLimitedLogHandler.logSuppressedSummaries(from: limiter, to: logger)
        #expect(box.lines.withLock { $0.last } ==
            "notice repeated log messages suppressed {suppressed=3 suppressed_message=protocol error, closing connection}")
    }

    @Test("the same text at another level is a different key")
    func levelIsPartOfTheKey() {
        let box = Recorder.Box()
        let limiter = LogRateLimiter(policy: .init(burst: 1, refillPerSecond: 0))
        var logger = Logger(label: "test") { _ in RateLimitedLogHandler(upstream: Recorder(box: box), limiter: limiter) }
        logger.logLevel = .trace
        logger.debug("x")
        logger.warning("x")
        logger.warning("x")
        #expect(box.lines.withLock { $0.count } == 2)
    }

    @Test("an admitted event after suppression is preceded by the count")
    func summaryBeforeNextEvent() {
        let box = Recorder.Box()
        let limiter = LogRateLimiter(policy: .init(burst: 1, refillPerSecond: 1))
        var logger = Logger(label: "test") { _ in RateLimitedLogHandler(upstream: Recorder(box: box), limiter: limiter) }
        logger.logLevel = .trace
        // Spend the token and suppress two events 100 s ago (the key is "<level>|<message>"); by now the bucket
        // has refilled, so the next event passes and reports them.
        let past = LogRateLimiter.monotonicSeconds() - 100
        #expect(limiter.admit("info|x", now: past) == .log(suppressedBefore: 0))
        #expect(limiter.admit("info|x", now: past) == .suppress)
        #expect(limiter.admit("info|x", now: past) == .suppress)
        logger.info("x", metadata: ["n": "1"])
        #expect(box.lines.withLock { $0 } == [
            "info repeated log messages suppressed {suppressed=2 suppressed_message=x}",
            "info x {n=1}",
        ])
    }

    @Test("level and metadata are the upstream's")
    func forwardsSettings() {
        let box = Recorder.Box()
        var handler = RateLimitedLogHandler(upstream: Recorder(box: box), limiter: LogRateLimiter())
        handler.logLevel = .error
        handler[metadataKey: "a"] = "1"
        #expect(handler.upstream.logLevel == .error)
        #expect(handler.upstream.metadata["a"] == "1")
        #expect(handler.metadata["a"] == "1")
    }
}
