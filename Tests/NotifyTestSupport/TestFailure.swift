import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NotifyWire

/// A test helper's loud failure: a wait that timed out, a frame that was not the one expected, a connection
/// that ended too early.
package struct TestFailure: Error, CustomStringConvertible {
    package var description: String

    package init(_ description: String) {
        self.description = description
    }
}

/// How long any single wait in these tests may take before the test fails.
package let defaultTimeout = TimeAmount.seconds(TestScale.isSlowed ? 90 : 15)

/// Test sizes and timeouts for the current build: `make sanitize` sets `TSAN_OPTIONS`, and ThreadSanitizer
/// makes every thread hop several times slower, so heavy tests shrink and waits last longer there.
/// `make sanitize-address` sets `ASAN_OPTIONS`: the tests keep their sizes (what AddressSanitizer checks is the
/// memory they touch), but waits last longer, since hundreds of slowed tests start at once on a loaded machine.
package enum TestScale {
    package static let isSanitized = ProcessInfo.processInfo.environment["TSAN_OPTIONS"] != nil
    /// Under either sanitizer: waits last longer.
    package static let isSlowed = isSanitized || ProcessInfo.processInfo.environment["ASAN_OPTIONS"] != nil
    /// `count`, or a tenth of it under ThreadSanitizer.
    package static func count(_ count: Int) -> Int { isSanitized ? max(1, count / 10) : count }
    /// `seconds`, or six times as long under either sanitizer.
    package static func timeout(_ seconds: Double) -> Double { isSlowed ? seconds * 6 : seconds }
    /// A suite's time limit in minutes, `minutes`, or five times as long under either sanitizer: there every test
    /// of a run starts at once on two slowed cores, and a test that takes 5 s alone can finish after 90 s.
    package static func minutes(_ minutes: Int) -> Int { isSlowed ? minutes * 5 : minutes }
}

extension Duration {
    /// The duration in seconds, for messages.
    package var secondsDescription: String {
        let seconds = Double(components.seconds) + Double(components.attoseconds) / 1e18
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }
}

extension TimeAmount {
    /// The amount in seconds, for messages.
    package var secondsDescription: String { Duration.nanoseconds(nanoseconds).secondsDescription }
}

extension NotificationFrame {
    /// The fields of a notification for failure messages (a short UTF-8 payload as text, others by size).
    package var summaryFields: String {
        "sequence \(sequence), '\(name)', " + payloadSummary
    }

    /// The payload as text.
    package var payloadText: String { String(decoding: payload.readableBytesView, as: UTF8.self) }

    private var payloadSummary: String {
        if payload.readableBytes <= 32, let text = payload.getString(at: payload.readerIndex, length: payload.readableBytes),
            text.unicodeScalars.allSatisfy({ !$0.properties.isDefaultIgnorableCodePoint && $0.value >= 0x20 })
        {
            return "payload '\(text)'"
        }
        return "\(payload.readableBytes) payload bytes"
    }
}

extension ServerFrame {
    /// A short description for failure messages (payloads summarised).
    package var summary: String {
        if case .queryResult(let requestID, let json) = self {
            return "QUERY_RESULT(request \(requestID), \(json.readableBytes) JSON bytes)"
        }
        switch self {
        case .welcome(let welcome):
            return "WELCOME(version \(welcome.version), pid \(welcome.daemonPID), instance \(welcome.instanceID))"
        case .ok(let requestID):
            return "OK(\(requestID))"
        case .posted(let requestID, let sequence, let deliveredCount):
            return "POSTED(request \(requestID), sequence \(sequence), delivered \(deliveredCount))"
        case .pong(let requestID):
            return "PONG(\(requestID))"
        case .notification(let notification):
            return "NOTIFICATION(\(notification.summaryFields))"
        case .notificationMerged(let mergedCount, let notification):
            return "NOTIFICATION_MERGED(merged \(mergedCount), \(notification.summaryFields))"
        case .retained(let requestID, let notification):
            return "RETAINED(request \(requestID), \(notification.summaryFields))"
        case .overflow(let subscriptionID, let droppedCount):
            return "OVERFLOW(subscription \(subscriptionID), dropped \(droppedCount))"
        case .state(let requestID, let value):
            return "STATE(request \(requestID), \(value.map { "value \($0)" } ?? "no value"))"
        case .error(let error):
            return "ERROR(request \(error.requestID), \(error), closing \(error.closesConnection))"
        case .goodbye(let goodbye):
            return "GOODBYE(reconnect after \(goodbye.reconnectAfterMilliseconds) ms, '\(goodbye.reason)')"
        default:
            // QUERY_RESULT (above), and frame types added to the protocol after this was written, so that a new
            // frame type does not stop the suites from compiling.
            return "\(messageType)"
        }
    }

    /// The notification fields, if this is a `NOTIFICATION`.
    package var notification: NotificationFrame? {
        if case .notification(let notification) = self { return notification }
        return nil
    }

    /// The notification fields of `NOTIFICATION`, `NOTIFICATION_MERGED` or `RETAINED`.
    package var anyNotification: NotificationFrame? {
        switch self {
        case .notification(let n), .notificationMerged(_, let n), .retained(_, let n): n
        default: nil
        }
    }

    /// The error fields, if this is an `ERROR`.
    package var errorFrame: ErrorFrame? {
        if case .error(let error) = self { return error }
        return nil
    }

    /// The request id this frame finally answers (`OK`, `POSTED`, `PONG`, `STATE`, `QUERY_RESULT`, or an `ERROR`
    /// with a request id), if it is a final answer.
    package var answeredRequestID: UInt32? {
        switch self {
        case .ok(let id), .pong(let id), .posted(let id, _, _), .state(let id, _), .queryResult(let id, _): id
        case .error(let error): error.requestID == 0 ? nil : error.requestID
        default: nil
        }
    }
}

/// Runs `body`, failing with a ``TestFailure`` naming `what` if it does not finish within `seconds` (scaled by
/// ``TestScale``).
///
/// Unlike a task group, this returns at the deadline even when `body` is stuck in a call that ignores
/// cancellation (a blocking read on another thread, a future that never completes); `body` is then cancelled.
package func withTimeout<T: Sendable>(
    _ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let seconds = TestScale.timeout(seconds)
    return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let once = ResumeOnce(continuation)
        let work = Task {
            do {
                once.resume(with: .success(try await body()))
            } catch {
                once.resume(with: .failure(error))
            }
        }
        Task {
            try? await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            if once.resume(with: .failure(TestFailure("timed out after \(seconds) s: \(what)"))) { work.cancel() }
        }
    }
}

/// Calls `check` every `interval` until it returns a value, and returns that; fails with a ``TestFailure`` naming
/// `what` once `timeout` has passed (`what` is evaluated then, so it may describe the last thing `check` saw).
/// `check` may throw to fail early.
///
/// The one polling loop of the tests, for effects nothing replies to or signals (a thread ending, a process's
/// output, a peer noticing a closed connection); where there is a reply, a barrier or an event to wait on, wait on
/// that instead. The timeout is taken as given (not scaled by ``TestScale``).
package func poll<T: Sendable>(
    _ what: @autoclosure () -> String, timeout: Duration, interval: Duration = .milliseconds(10),
    _ check: () async throws -> T?
) async throws -> T {
    let deadline = ContinuousClock.now + timeout
    while true {
        if let result = try await check() { return result }
        if ContinuousClock.now >= deadline {
            throw TestFailure("timed out after \(timeout.secondsDescription) waiting for \(what())")
        }
        try await Task.sleep(for: interval)
    }
}

/// Resumes a continuation the first time only.
private final class ResumeOnce<T: Sendable>: Sendable {
    private let continuation: NIOLockedValueBox<CheckedContinuation<T, any Error>?>

    init(_ continuation: CheckedContinuation<T, any Error>) {
        self.continuation = NIOLockedValueBox(continuation)
    }

    @discardableResult
    func resume(with result: Result<T, any Error>) -> Bool {
        guard let continuation = continuation.withLockedValue({ value in
            defer { value = nil }
            return value
        }) else { return false }
        continuation.resume(with: result)
        return true
    }
}
