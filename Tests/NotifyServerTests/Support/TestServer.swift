import Foundation
import Logging
import NIOCore
import NotifyWire
import Testing

@testable import NotifyServer

/// A real ``NotifyServer`` running in-process on a socket in a fresh temporary directory.
final class TestServer: Sendable {
    let server: NotifyServer
    /// The temporary directory holding the socket (removed by ``stop()``).
    let directory: String
    let socketPath: String
    /// What `onListening` reported.
    let listeningAddress: String
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
    static let logger: Logger = {
        if ProcessInfo.processInfo.environment["NOTIFYD_TEST_LOG"] != nil {
            var logger = Logger(label: "notifyd.test")
            logger.logLevel = .trace
            return logger
        }
        return Logger(label: "notifyd.test", factory: { _ in SwiftLogNoOpLogHandler() })
    }()

    /// The configuration tests start from: the socket at `path`, a generous shutdown deadline.
    static func configuration(path: String) -> ServerConfiguration {
        ServerConfiguration(listenAddress: .path(path), shutdownDeadlineSeconds: 30)
    }

    /// Starts a server in a fresh temporary directory and waits until it listens.
    static func start(
        _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestServer {
        let directory = try makeTemporaryDirectory()
        do {
            return try await start(in: directory, configure)
        } catch {
            removeDirectory(directory)
            throw error
        }
    }

    /// Starts a server on `directory/notifyd.sock` and waits until it listens; throws what `run()` threw if it
    /// stops before listening.
    static func start(
        in directory: String, socketName: String = "notifyd.sock",
        _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestServer {
        let path = directory + "/" + socketName
        var configuration = configuration(path: path)
        configure(&configuration)
        let listening = OneShot<String>()
        let finished = OneShot<Void>()
        let server = NotifyServer(configuration: configuration, logger: logger) { address in
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
            address = try await listening.wait(for: "the server at \(path) to call onListening")
        } catch let error as TestFailure {
            runTask.cancel()
            throw error
        }
        return TestServer(
            server: server, directory: directory, socketPath: path, listeningAddress: address, runTask: runTask,
            finished: finished)
    }

    /// Connects a client and completes the handshake.
    func connect(_ name: String, receiveBufferSize: Int? = nil) async throws -> TestClient {
        let client = try await TestClient.connect(to: socketPath, name: name, receiveBufferSize: receiveBufferSize)
        try await client.hello()
        return client
    }

    /// Connects a client without sending anything.
    func connectRaw(_ name: String) async throws -> TestClient {
        try await TestClient.connect(to: socketPath, name: name)
    }

    /// The server's snapshot; fails if the server is not running.
    func snapshot(sourceLocation: SourceLocation = #_sourceLocation) async throws -> ServerSnapshot {
        try #require(await server.snapshot(), "the server is running, so it has a snapshot", sourceLocation: sourceLocation)
    }

    /// Polls the snapshot until `condition` holds; fails after `timeout`.
    ///
    /// For effects that have no reply to wait on (a connection closed by its peer), never for correctness
    /// that a barrier can establish.
    @discardableResult
    func waitForSnapshot(
        _ what: String, timeout: TimeAmount = defaultTimeout, _ condition: (ServerSnapshot) -> Bool
    ) async throws -> ServerSnapshot {
        let deadline = NIODeadline.now() + timeout
        while true {
            let snapshot = try await self.snapshot()
            if condition(snapshot) { return snapshot }
            if NIODeadline.now() > deadline {
                throw TestFailure("timed out after \(timeout.secondsDescription) waiting for the snapshot to show \(what)")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Waits for `run()` to return (after a shutdown) and rethrows what it threw.
    func waitUntilFinished(timeout: TimeAmount = .seconds(30)) async throws {
        try await finished.wait(timeout: timeout, for: "the server's run() to return")
    }

    /// `shutdown()`, waits for `run()` to return, and removes the temporary directory. Fails if `run()` does not
    /// return in time (the server is then cancelled) or threw.
    func stop() async throws {
        server.shutdown()
        do {
            try await waitUntilFinished()
        } catch {
            runTask.cancel()
            throw error
        }
        Self.removeDirectory(directory)
    }

    /// Cleanup after a failed test: asks the server to stop without waiting for it, and removes the temporary
    /// directory.
    func abandon() {
        server.shutdown()
        runTask.cancel()
        Self.removeDirectory(directory)
    }

    // MARK: Temporary directories

    /// A fresh directory `/tmp/nst-XXXXXX` (short, so socket paths stay far below 108 bytes).
    static func makeTemporaryDirectory() throws -> String {
        var template = Array("/tmp/nst-XXXXXX".utf8CString)
        let created = template.withUnsafeMutableBufferPointer { buffer -> String? in
            guard let path = mkdtemp(buffer.baseAddress!) else { return nil }
            return String(cString: path)
        }
        guard let created else { throw TestFailure("mkdtemp failed: errno \(errno)") }
        return created
    }

    static func removeDirectory(_ directory: String) {
        // A stopping server may unlink its socket file while the directory is being removed, which makes one
        // attempt fail; try again.
        for _ in 0..<3 {
            if (try? FileManager.default.removeItem(atPath: directory)) != nil { return }
            if !FileManager.default.fileExists(atPath: directory) { return }
        }
    }
}

/// Runs `body` against a fresh server and stops it afterwards (also when `body` throws).
func withServer(
    _ configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (TestServer) async throws -> Void
) async throws {
    let server = try await TestServer.start(configure)
    do {
        try await body(server)
    } catch {
        server.abandon()
        throw error
    }
    try await server.stop()
}
