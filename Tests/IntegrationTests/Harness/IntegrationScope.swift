#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport
import Testing

/// One test's world: a short temporary directory (for the socket) and every process the test started.
///
/// ``withIntegrationScope(_:)`` kills whatever is still running and removes the directory when the test ends,
/// whether it passed or failed.
final class IntegrationScope: Sendable {
    /// `/tmp/nit-XXXXXX`: short, because Unix socket paths must fit in 108 bytes.
    let directory: String
    private let children = Locked<[ChildProcess]>([])

    /// The default socket path in this scope's directory.
    var socketPath: String { directory + "/s.sock" }

    init() throws {
        var template = Array("/tmp/nit-XXXXXX".utf8CString)
        guard let created = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw TestFailure("mkdtemp failed: \(String(cString: strerror(errno)))")
        }
        directory = String(cString: created)
    }

    /// Starts `tool` with `arguments`; the scope kills it at the end if it is still running.
    /// `environment` adds to (or replaces entries of) the test process's own environment.
    func launch(_ tool: Tool, _ arguments: [String], environment: [String: String] = [:]) throws -> ChildProcess {
        let merged = environment.isEmpty
            ? nil : ProcessInfo.processInfo.environment.merging(environment) { _, override in override }
        let child = try ChildProcess(
            executable: try BuildProducts.url(of: tool), arguments: arguments, environment: merged)
        children.withLock { $0.append(child) }
        return child
    }

    /// Starts `tool` through `sh -c "<setup>; exec tool arguments…"`, e.g. to run it under a lower `ulimit`; the
    /// scope kills it at the end if it is still running.
    func launch(_ tool: Tool, _ arguments: [String], after setup: String) throws -> ChildProcess {
        let child = try ChildProcess(
            executable: URL(fileURLWithPath: "/bin/sh"),
            arguments: ["-c", setup + "; exec \"$0\" \"$@\"", try BuildProducts.url(of: tool).path] + arguments)
        children.withLock { $0.append(child) }
        return child
    }

    /// Makes the scope kill `child` at the end if it is still running.
    func adopt(_ child: ChildProcess) {
        children.withLock { $0.append(child) }
    }

    /// Runs `tool` to completion and returns it (exit state and output).
    func run(_ tool: Tool, _ arguments: [String], timeout: Double = 20) async throws -> ChildProcess {
        let child = try launch(tool, arguments)
        try await child.waitForExit(timeout: timeout)
        return child
    }

    /// Starts `notifyd` on `socketPath` (default: ``socketPath``) and waits until it accepts connections.
    func startDaemon(socketPath: String? = nil) async throws -> DaemonProcess {
        try await DaemonProcess.start(socketPath: socketPath ?? self.socketPath) { try launch($0, $1) }
    }

    /// Kills every child that is still running, waits for them, and removes the directory.
    func cleanUp() async {
        let running = children.withLock { $0 }.filter(\.isRunning)
        for child in running { child.send(SIGKILL) }
        for child in running { _ = try? await child.waitForExit(timeout: 10) }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Runs `body` in a fresh ``IntegrationScope`` and cleans up afterwards, also when `body` throws.
func withIntegrationScope<T>(_ body: (IntegrationScope) async throws -> T) async throws -> T {
    let scope = try IntegrationScope()
    do {
        let result = try await body(scope)
        await scope.cleanUp()
        return result
    } catch {
        await scope.cleanUp()
        throw error
    }
}

/// Runs `body` with a daemon on the scope's socket; afterwards, if the daemon still runs, stops it with SIGTERM
/// and checks that it shut down cleanly.
func withDaemon<T>(
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (IntegrationScope, DaemonProcess) async throws -> T
) async throws -> T {
    try await withIntegrationScope { scope in
        let daemon = try await scope.startDaemon()
        let result = try await body(scope, daemon)
        if daemon.child.isRunning {
            try await daemon.stop(sourceLocation: sourceLocation)
        }
        return result
    }
}

extension IntegrationScope {
    /// Posts `payload` under `name` with `notifyctl post --wait` until the daemon reports at least `subscribers`
    /// recipients, for use right after clients reconnected (when their resubscriptions may still be in flight).
    ///
    /// - Returns: how many posts it took.
    @discardableResult
    func postUntilDelivered(
        _ name: String, payload: String, toAtLeast subscribers: Int, socketPath: String? = nil, timeout: Double = 20
    ) async throws -> Int {
        var attempts = 0
        var delivered = 0
        return try await poll(
            "posts to \(name) to reach \(subscribers) subscribers (the last reached \(delivered), \(attempts) attempts)",
            timeout: timeout, interval: .milliseconds(50)
        ) {
            attempts += 1
            let post = try await run(.notifyctl, ["post", name, payload, "--wait", "--socket", socketPath ?? self.socketPath])
            guard post.termination == .exited(0) else {
                throw TestFailure("notifyctl post failed\n\(post.diagnostics)")
            }
            delivered = try deliveredCount(fromPostOutput: post.stdoutLines)
            return delivered >= subscribers ? attempts : nil
        }
    }
}
