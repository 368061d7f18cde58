#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import NIOCore
import NotifyServer
import NotifyWire

/// The one in-process server of the tests: a real ``NotifyServer`` running in this process on a socket in a
/// fresh temporary directory.
package final class TestServer: Sendable {
    package let server: NotifyServer
    /// The directory holding the socket (removed by ``stop()``).
    package let directory: String
    package let socketPath: String
    /// What `onListening` reported.
    package let listeningAddress: String
    private let runTask: Task<Void, Never>
    private let finished: OneShot<Void>

    private init(
        server: NotifyServer, directory: String, socketPath: String, listeningAddress: String,
        runTask: Task<Void, Never>, finished: OneShot<Void>
    ) {
        self.server = server
        self.directory = directory
        self.socketPath = socketPath
        self.listeningAddress = listeningAddress
        self.runTask = runTask
        self.finished = finished
    }

    /// A logger that discards everything unless `NOTIFYD_TEST_LOG` is set.
    package static let logger: Logger = {
        if ProcessInfo.processInfo.environment["NOTIFYD_TEST_LOG"] != nil {
            var logger = Logger(label: "notifyd.test")
            logger.logLevel = .trace
            return logger
        }
        return Logger(label: "notifyd.test", factory: { _ in SwiftLogNoOpLogHandler() })
    }()

    /// The configuration tests start from: the socket at `path`, a generous shutdown deadline.
    package static func configuration(path: String) -> ServerConfiguration {
        ServerConfiguration(listenAddress: .path(path), shutdownDeadlineSeconds: 30)
    }

    /// Starts a server in a fresh temporary directory and waits until it listens.
    ///
    /// - Parameter everyUser: whether clients of every uid may connect (``TestClient/connect(to:name:as:receiveBufferSize:reading:)``
    ///   with another identity): the directory is made traversable (0755) and the socket mode 0666.
    package static func start(
        everyUser: Bool = false, _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestServer {
        let directory = try makeTemporaryDirectory()
        do {
            if everyUser, chmod(directory, 0o755) != 0 {
                throw TestFailure("chmod 0755 \(directory) failed: errno \(errno)")
            }
            return try await start(socketPath: directory + "/notifyd.sock") { configuration in
                if everyUser { configuration.socketMode = 0o666 }
                configure(&configuration)
            }
        } catch {
            removeDirectory(directory)
            throw error
        }
    }

    /// Starts a server on `directory/socketName` and waits until it listens.
    package static func start(
        in directory: String, socketName: String = "notifyd.sock",
        _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestServer {
        try await start(socketPath: directory + "/" + socketName, configure)
    }

    /// Starts a server on `socketPath` (its directory, removed by ``stop()``, may not exist yet: the server makes
    /// it) and waits until it listens; throws what `run()` threw if it stops before listening.
    ///
    /// - Parameter handover: what the server takes over from a predecessor (see ``NotifyServer``).
    package static func start(
        socketPath path: String, handover: IncomingHandover? = nil,
        _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestServer {
        var configuration = configuration(path: path)
        configure(&configuration)
        let listening = OneShot<String>()
        let finished = OneShot<Void>()
        let server = NotifyServer(configuration: configuration, logger: logger, handover: handover) { address in
            listening.fulfill(.success(address))
        }
        let runTask = Task {
            do {
                try await server.run()
                listening.fulfill(.failure(TestFailure("run() returned without calling onListening")))
                finished.fulfill(.success(()))
            } catch {
                listening.fulfill(.failure(error))
                finished.fulfill(.failure(error))
            }
        }
        let address: String
        do {
            // Generous: run() makes its way to listening on the cooperative pool, which two cores loaded by a whole
            // suite of in-process servers and clients starve for seconds (the fresh-clone CI of c7f4b32 timed out
            // eight starts at 15 s); a start is not what these tests time.
            address = try await listening.wait(
                timeout: .seconds(Int64(TestScale.timeout(60))), for: "the server at \(path) to call onListening")
        } catch let error as TestFailure {
            runTask.cancel()
            throw error
        }
        return TestServer(
            server: server, directory: (path as NSString).deletingLastPathComponent, socketPath: path,
            listeningAddress: address, runTask: runTask, finished: finished)
    }

    /// A socket path in a directory that does not exist yet, `/tmp/nst-PID-RANDOM/s.sock` (for a server started
    /// later, or none at all).
    package static func makeSocketPath() -> String {
        "/tmp/nst-\(getpid())-\(UInt32.random(in: 0...UInt32.max))/s.sock"
    }

    /// Connects a client as `identity` and completes the handshake.
    package func connect(
        _ name: String, as identity: PeerIdentity = .root, receiveBufferSize: Int? = nil
    ) async throws -> TestClient {
        let client = try await TestClient.connect(
            to: socketPath, name: name, as: identity, receiveBufferSize: receiveBufferSize)
        try await client.hello()
        return client
    }

    /// Connects a client without sending anything.
    package func connectRaw(_ name: String, as identity: PeerIdentity = .root) async throws -> TestClient {
        try await TestClient.connect(to: socketPath, name: name, as: identity)
    }

    /// The server's snapshot; fails if the server is not running.
    package func snapshot() async throws -> ServerSnapshot {
        guard let snapshot = await server.snapshot() else { throw TestFailure("the server is not running: no snapshot") }
        return snapshot
    }

    /// The daemon-wide figures (as `QUERY status` reports them); fails if the server is not running.
    package func status() async throws -> DaemonStatus {
        guard let status = await server.status() else { throw TestFailure("the server is not running: no status") }
        return status
    }

    /// Polls the snapshot until `condition` holds; fails after `timeout`.
    ///
    /// For effects that have no reply to wait on (a connection closed by its peer), never for correctness
    /// that a barrier can establish.
    @discardableResult
    package func waitForSnapshot(
        _ what: String, timeout: TimeAmount = defaultTimeout, _ condition: (ServerSnapshot) -> Bool
    ) async throws -> ServerSnapshot {
        try await pollUntil("the snapshot to show \(what)", timeout: timeout, { try await self.snapshot() }, condition)
    }

    /// Polls the status until `condition` holds; fails after `timeout`. Only for effects nothing replies to.
    @discardableResult
    package func waitForStatus(
        _ what: String, timeout: TimeAmount = defaultTimeout, _ condition: (DaemonStatus) -> Bool
    ) async throws -> DaemonStatus {
        try await pollUntil("the server status to show \(what)", timeout: timeout, { try await self.status() }, condition)
    }

    private func pollUntil<Value: Sendable>(
        _ what: String, timeout: TimeAmount, _ read: () async throws -> Value, _ condition: (Value) -> Bool
    ) async throws -> Value {
        var last: Value?
        return try await poll(
            "\(what): \(last.map { "\($0)" } ?? "nothing read")", timeout: .nanoseconds(timeout.nanoseconds),
            interval: .milliseconds(5)
        ) {
            let value = try await read()
            last = value
            return condition(value) ? value : nil
        }
    }

    /// Waits for `run()` to return (after a shutdown) and rethrows what it threw. By default longer than the test
    /// servers' shutdown deadline (30 s), after which `run()` returns whatever its clients do, and six times as long
    /// under a sanitizer, as other waits: the wait's own 30 s failed under ThreadSanitizer in two CI runs.
    package func waitUntilFinished(timeout: TimeAmount = .seconds(Int64(TestScale.timeout(45)))) async throws {
        try await finished.wait(timeout: timeout, for: "the server's run() to return")
    }

    /// `shutdown()`, waits for `run()` to return, and removes the socket's directory. Fails if `run()` does not
    /// return in time (the server is then cancelled) or threw.
    package func stop() async throws {
        server.shutdown()
        do {
            try await waitUntilFinished()
        } catch {
            runTask.cancel()
            throw error
        }
        Self.removeDirectory(directory)
    }

    /// Cleanup after a failed test: asks the server to stop without waiting for it, and removes the directory.
    package func abandon() {
        server.shutdown()
        runTask.cancel()
        Self.removeDirectory(directory)
    }

    // MARK: Temporary directories

    /// A fresh directory `/tmp/nst-XXXXXX` (short, so socket paths stay far below 108 bytes).
    package static func makeTemporaryDirectory() throws -> String {
        var template = Array("/tmp/nst-XXXXXX".utf8CString)
        let created = template.withUnsafeMutableBufferPointer { buffer -> String? in
            guard let path = mkdtemp(buffer.baseAddress!) else { return nil }
            return String(cString: path)
        }
        guard let created else { throw TestFailure("mkdtemp failed: errno \(errno)") }
        return created
    }

    package static func removeDirectory(_ directory: String) {
        // A stopping server may unlink its socket file while the directory is being removed, which makes one
        // attempt fail; try again.
        for _ in 0..<3 {
            if (try? FileManager.default.removeItem(atPath: directory)) != nil { return }
            if !FileManager.default.fileExists(atPath: directory) { return }
        }
    }
}

/// Runs `body` against a fresh server and stops it afterwards (also when `body` throws).
///
/// - Parameter everyUser: whether clients of every uid may connect (see ``TestServer/start(everyUser:_:)``).
package func withServer(
    everyUser: Bool = false,
    _ configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (TestServer) async throws -> Void
) async throws {
    let server = try await TestServer.start(everyUser: everyUser, configure)
    do {
        try await body(server)
    } catch {
        server.abandon()
        throw error
    }
    try await server.stop()
}
