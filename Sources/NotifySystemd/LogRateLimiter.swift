#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOConcurrencyHelpers

/// Token buckets per message key, to keep noisy log events (one misbehaving client hammering the daemon with
/// bad frames, a flood of connections) from flooding the log.
///
/// Each key (``RateLimitedLogHandler`` uses the level and the message text, not the metadata) may log
/// ``Policy/burst`` events at once and ``Policy/refillPerSecond`` per second after that. Suppressed events are
/// counted: the next event that is admitted reports how many were suppressed before it, and
/// ``drainSummaries(now:)`` hands out the counts of keys that went quiet, for a periodic "suppressed N
/// messages" line.
package final class LogRateLimiter: Sendable {
    /// How many events a key may log.
    package struct Policy: Sendable, Hashable {
        /// Events logged at once before limiting starts (the bucket size).
        package var burst: Int
        /// Events per second admitted in the long run (the refill rate).
        package var refillPerSecond: Double

        /// Creates a policy.
        package init(burst: Int, refillPerSecond: Double) {
            self.burst = max(1, burst)
            self.refillPerSecond = max(0, refillPerSecond)
        }

        /// 20 at once, then 5 per second.
        package static let `default` = Policy(burst: 20, refillPerSecond: 5)
    }

    /// What to do with one event.
    package enum Decision: Sendable, Hashable {
        /// Log it. `suppressedBefore` events with the same key were suppressed since the last report.
        case log(suppressedBefore: Int)
        /// Drop it (it is counted).
        case suppress
    }

    /// Suppressed events of one key since the last report.
    package struct Summary: Sendable, Hashable {
        /// The key, as passed to ``admit(_:now:)``.
        package var key: String
        /// How many events were suppressed.
        package var suppressed: Int

        /// Creates a summary.
        package init(key: String, suppressed: Int) {
            self.key = key
            self.suppressed = suppressed
        }
    }

    private struct Bucket {
        var tokens: Double
        var updated: Double
        var suppressed: Int
    }

    /// The policy every key follows.
    package let policy: Policy
    /// At most this many keys are tracked; beyond it, keys with nothing suppressed are forgotten.
    package let maximumKeys: Int
    // NIOLockedValueBox (a pthread mutex) rather than Synchronization.Mutex, whose futex locking
    // ThreadSanitizer cannot see in `make sanitize`.
    private let buckets = NIOLockedValueBox<[String: Bucket]>([:])

    /// Creates a limiter.
    package init(policy: Policy = .default, maximumKeys: Int = 1_024) {
        self.policy = policy
        self.maximumKeys = max(1, maximumKeys)
    }

    /// Decides about one event with `key` at monotonic time `now` (seconds; default: the monotonic clock).
    package func admit(_ key: String, now: Double = LogRateLimiter.monotonicSeconds()) -> Decision {
        let policy = self.policy
        let maximumKeys = self.maximumKeys
        return buckets.withLockedValue { buckets in
            var bucket = buckets[key] ?? Bucket(tokens: Double(policy.burst), updated: now, suppressed: 0)
            let elapsed = max(0, now - bucket.updated)
            bucket.tokens = min(Double(policy.burst), bucket.tokens + elapsed * policy.refillPerSecond)
            bucket.updated = now
            let decision: Decision
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                decision = .log(suppressedBefore: bucket.suppressed)
                bucket.suppressed = 0
            } else {
                bucket.suppressed += 1
                decision = .suppress
            }
            if buckets[key] == nil, buckets.count >= maximumKeys {
                buckets = buckets.filter { $0.value.suppressed > 0 }
            }
            buckets[key] = bucket
            return decision
        }
    }

    /// Takes the suppressed counts of every key that suppressed something since its last report, sorted by key,
    /// and resets them.
    package func drainSummaries(now: Double = LogRateLimiter.monotonicSeconds()) -> [Summary] {
        buckets.withLockedValue { buckets in
            var summaries: [Summary] = []
            for (key, bucket) in buckets where bucket.suppressed > 0 {
                summaries.append(Summary(key: key, suppressed: bucket.suppressed))
                buckets[key]?.suppressed = 0
            }
            return summaries.sorted { $0.key < $1.key }
        }
    }

    /// Seconds on the monotonic clock (`CLOCK_MONOTONIC`).
    package static func monotonicSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
