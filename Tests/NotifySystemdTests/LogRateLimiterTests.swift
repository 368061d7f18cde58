import NotifySystemd
import Testing

@Suite("Log rate limiter")
struct LogRateLimiterTests {
    @Test("a burst is admitted, then events are suppressed until tokens refill")
    func tokenBucket() {
        let limiter = LogRateLimiter(policy: .init(burst: 3, refillPerSecond: 1))
        let decisions = (0..<5).map { _ in limiter.admit("k", now: 100) }
        #expect(decisions == [
            .log(suppressedBefore: 0), .log(suppressedBefore: 0), .log(suppressedBefore: 0), .suppress, .suppress,
        ])
        // Half a second later no whole token has come back.
        #expect(limiter.admit("k", now: 100.5) == .suppress)
        // One second after the burst, one token: the event reports the three suppressed before it.
        #expect(limiter.admit("k", now: 101.01) == .log(suppressedBefore: 3))
        #expect(limiter.admit("k", now: 101.02) == .suppress)
    }

    @Test("keys are independent")
    func independentKeys() {
        let limiter = LogRateLimiter(policy: .init(burst: 1, refillPerSecond: 0))
        #expect(limiter.admit("a", now: 0) == .log(suppressedBefore: 0))
        #expect(limiter.admit("a", now: 0) == .suppress)
        #expect(limiter.admit("b", now: 0) == .log(suppressedBefore: 0))
    }

    @Test("the bucket never holds more than the burst, however long the pause")
    func refillIsCapped() {
        let limiter = LogRateLimiter(policy: .init(burst: 2, refillPerSecond: 10))
        _ = limiter.admit("k", now: 0)
        let later = (0..<4).map { _ in limiter.admit("k", now: 1_000) }
        #expect(later == [.log(suppressedBefore: 0), .log(suppressedBefore: 0), .suppress, .suppress])
    }

    @Test("summaries report suppressed counts once, sorted by key")
    func summaries() {
        let limiter = LogRateLimiter(policy: .init(burst: 1, refillPerSecond: 0))
        for _ in 0..<4 { _ = limiter.admit("b", now: 0) }
        for _ in 0..<2 { _ = limiter.admit("a", now: 0) }
        _ = limiter.admit("quiet", now: 0)
        #expect(limiter.drainSummaries(now: 1) == [
            .init(key: "a", suppressed: 1), .init(key: "b", suppressed: 3),
        ])
        #expect(limiter.drainSummaries(now: 2) == [])
    }

    @Test("the number of tracked keys stays bounded")
    func boundedKeys() {
        let limiter = LogRateLimiter(policy: .init(burst: 1, refillPerSecond: 0), maximumKeys: 8)
        _ = limiter.admit("noisy", now: 0)
        _ = limiter.admit("noisy", now: 0)  // suppressed: kept when the table is pruned
        for index in 0..<100 { _ = limiter.admit("key-\(index)", now: 0) }
        #expect(limiter.drainSummaries(now: 0) == [.init(key: "noisy", suppressed: 1)])
    }
}
