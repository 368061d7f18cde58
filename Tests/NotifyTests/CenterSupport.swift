import Foundation
import NIOConcurrencyHelpers
import Logging
import NotifyServer
import NotifyTestSupport
import NotifyWire
import Testing

@testable import Notify

extension TestServer {
    /// A client-library center connected to this server.
    func center(reconnect: NotifyCenter.ReconnectPolicy = .default) async throws -> NotifyCenter {
        try await NotifyCenter.connect(
            configuration: NotifyCenter.Configuration(socketPath: socketPath, clientName: "test", reconnect: reconnect))
    }
}

/// Collects values from any thread and lets a test wait for a count.
final class Collector<Value: Sendable>: Sendable {
    private let condition = NSCondition()
    nonisolated(unsafe) private var storage: [Value] = []

    func append(_ value: Value) {
        condition.lock()
        storage.append(value)
        condition.broadcast()
        condition.unlock()
    }

    var values: [Value] {
        condition.lock()
        defer { condition.unlock() }
        return storage
    }

    /// Waits until at least `count` values arrived; throws after `timeout` seconds. The blocking wait runs
    /// off the cooperative thread pool.
    func wait(for count: Int, timeout: Double = 10, _ what: String = "values") async throws -> [Value] {
        let timeout = TestScale.timeout(timeout)
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try self.blockingWait(for: count, timeout: timeout, what) })
            }
        }
    }

    private func blockingWait(for count: Int, timeout: Double, _ what: String) throws -> [Value] {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while storage.count < count {
            if !condition.wait(until: deadline) {
                throw TestFailure("timed out waiting for \(count) \(what), got \(storage.count)")
            }
        }
        return storage
    }
}

/// A dispatch queue that knows whether the code running is on it: handlers call ``check()``, and a test
/// expects ``offTargetCount`` to stay 0.
final class TargetQueue: Sendable {
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Bool>()
    private let offTarget = NIOLockedValueBox(0)

    init(label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: true)
    }

    /// Counts a call made anywhere but on ``queue``.
    func check() {
        if DispatchQueue.getSpecific(key: key) != true { offTarget.withLockedValue { $0 += 1 } }
    }

    /// How many ``check()`` calls ran elsewhere.
    var offTargetCount: Int { offTarget.withLockedValue { $0 } }
}
