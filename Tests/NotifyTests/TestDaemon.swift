import Foundation
import Logging
import NotifyServer
import NotifyWire
import Testing

@testable import Notify

/// An in-process daemon on a private socket, for client-library tests.
final class TestDaemon: Sendable {
    let server: NotifyServer
    let socketPath: String
    private let task: Task<Void, Error>

    private init(server: NotifyServer, socketPath: String, task: Task<Void, Error>) {
        self.server = server
        self.socketPath = socketPath
        self.task = task
    }

    /// Starts a daemon and returns once it accepts connections.
    static func start(
        socketPath: String? = nil, configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestDaemon {
        let path = socketPath ?? makeSocketPath()
        var configuration = ServerConfiguration(listenAddress: .path(path))
        configure(&configuration)
        let (listening, continuation) = AsyncStream<Void>.makeStream()
        let server = NotifyServer(
            configuration: configuration, logger: Logger(label: "test-daemon", factory: { _ in SwiftLogNoOpLogHandler() })
        ) { _ in
            continuation.yield()
            continuation.finish()
        }
        let task = Task { try await server.run() }
        try await withTimeout(10, "daemon did not start listening") {
            var iterator = listening.makeAsyncIterator()
            _ = await iterator.next()
        }
        return TestDaemon(server: server, socketPath: path, task: task)
    }

    /// Stops the daemon gracefully and waits until it has.
    func stop() async throws {
        server.shutdown()
        try await withTimeout(10, "daemon did not stop") { try await self.task.value }
    }

    static func makeSocketPath() -> String {
        let directory = "/tmp/ntt-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        return directory + "/s.sock"
    }

    func center(reconnect: NotifyCenter.ReconnectPolicy = .default) async throws -> NotifyCenter {
        try await NotifyCenter.connect(
            configuration: NotifyCenter.Configuration(socketPath: socketPath, clientName: "test", reconnect: reconnect))
    }
}

struct TimeoutError: Error, CustomStringConvertible {
    var description: String
}

/// Runs `body`, failing with `message` if it takes longer than `seconds`.
func withTimeout<T: Sendable>(
    _ seconds: Double, _ message: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let seconds = TestScale.timeout(seconds)
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw TimeoutError(description: "timed out after \(seconds) s: \(message)")
        }
        return value
    }
}

/// Test sizes and timeouts for the current build: `make sanitize` sets `TSAN_OPTIONS`, and ThreadSanitizer
/// makes every thread hop several times slower, so heavy tests shrink and waits last longer there.
enum TestScale {
    static let isSanitized = ProcessInfo.processInfo.environment["TSAN_OPTIONS"] != nil
    /// `count`, or a tenth of it under ThreadSanitizer.
    static func count(_ count: Int) -> Int { isSanitized ? max(1, count / 10) : count }
    /// `seconds`, or six times as long under ThreadSanitizer.
    static func timeout(_ seconds: Double) -> Double { isSanitized ? seconds * 6 : seconds }
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
                throw TimeoutError(description: "timed out waiting for \(count) \(what), got \(storage.count)")
            }
        }
        return storage
    }
}
