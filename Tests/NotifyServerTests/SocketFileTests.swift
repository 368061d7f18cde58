import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

@Suite("Socket file", .timeLimit(.minutes(TestScale.minutes(2))))
struct SocketFileTests {
    @Test("A stale socket file is replaced at start, and the socket file is removed after shutdown")
    func staleSocketIsReplaced() async throws {
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        let path = directory + "/notifyd.sock"
        try UnixSocketAddress.leaveStaleSocket(at: path)
        #expect(fileType(at: path) == S_IFSOCK)

        let server = try await TestServer.start(in: directory)
        do {
            #expect(fileType(at: path) == S_IFSOCK)
            let client = try await server.connect("after-stale")
            try await client.expectQuiet()
        } catch {
            server.abandon()
            throw error
        }
        try await server.stop()
        #expect(fileType(at: path) == nil, "the server removes its socket file when it stops")
    }

    @Test("The socket file is removed after shutdown; the default mode is 0600")
    func socketFileLifecycle() async throws {
        let server = try await TestServer.start()
        let path = server.socketPath
        var info = stat()
        #expect(lstat(path, &info) == 0)
        #expect(info.st_mode & S_IFMT == S_IFSOCK)
        #expect(info.st_mode & 0o777 == 0o600)
        try await server.stop()
        #expect(fileType(at: path) == nil)
        #expect(await server.server.snapshot() == nil, "no snapshot once stopped")
    }

    @Test("The socket appears with exactly the configured mode, and nothing else is left in its directory")
    func socketModeAndNoLeftovers() async throws {
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        // Bound in a private directory next to the path and moved into place with its mode already set, so a
        // client never finds it with the umask's permissions; the private directory goes away again.
        let server = try await TestServer.start(in: directory) { $0.socketMode = 0o666 }
        do {
            var info = stat()
            #expect(lstat(server.socketPath, &info) == 0)
            #expect(info.st_mode & 0o777 == 0o666)
            // Beside the socket only the control socket of `notifyd --replace`, for the daemon's own user alone.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == ["notifyd.sock", "notifyd.sock.replace"])
            #expect(lstat(server.socketPath + ".replace", &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600)
            try await server.connect("after-move").expectQuiet()
        } catch {
            server.abandon()
            throw error
        }
        try await server.stop()
    }

    @Test("Missing directories of the socket path are created")
    func createsDirectories() async throws {
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        let server = try await TestServer.start(in: directory, socketName: "a/b/notifyd.sock")
        do {
            #expect(fileType(at: directory + "/a/b") == S_IFDIR)
            try await server.connect("nested").expectQuiet()
        } catch {
            server.abandon()
            throw error
        }
        try await server.stop()
    }

    @Test("A file that is not a socket at the path makes run() throw socketSetupFailed and is left alone")
    func regularFileInTheWay() async throws {
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        let path = directory + "/notifyd.sock"
        #expect(FileManager.default.createFile(atPath: path, contents: Data("precious".utf8)))

        let error = await #expect(throws: ServerError.self) {
            let server = try await TestServer.start(in: directory)
            server.abandon()
        }
        guard case .socketSetupFailed(let failedPath, _) = error else {
            Issue.record("expected socketSetupFailed, got \(String(describing: error))")
            return
        }
        #expect(failedPath == path)
        #expect(fileType(at: path) == S_IFREG)
        #expect(FileManager.default.contents(atPath: path) == Data("precious".utf8))
    }

    @Test("A daemon whose socket file was replaced (the directory wiped, a new daemon started) leaves the new one's files when it stops")
    func stoppingLeavesAnotherDaemonsSocket() async throws {
        let first = try await TestServer.start()
        // logind empties XDG_RUNTIME_DIR at logout; the first daemon survives, the user's next login starts another.
        #expect(unlink(first.socketPath) == 0 && unlink(first.socketPath + ".replace") == 0, "errno \(errno)")
        let second = try await TestServer.start(in: first.directory)
        first.server.shutdown()
        try await first.waitUntilFinished()
        #expect(fileType(at: second.socketPath) == S_IFSOCK, "the first daemon removed the second's socket")
        #expect(fileType(at: second.socketPath + ".replace") == S_IFSOCK, "the first daemon removed the second's control socket")
        _ = try await second.connect("after")
        try await second.stop()
    }

    @Test("A second server on the path of a running one throws alreadyRunning and leaves the first one working")
    func secondServerOnSamePath() async throws {
        let first = try await TestServer.start()
        do {
            let early = try await first.connect("early")
            let error = await #expect(throws: ServerError.self) {
                let second = try await TestServer.start(in: first.directory)
                second.server.shutdown()  // not abandon(): the directory is the first server's
            }
            guard case .alreadyRunning(let path) = error else {
                Issue.record("expected alreadyRunning, got \(String(describing: error))")
                first.abandon()
                return
            }
            #expect(path == first.socketPath)
            #expect(fileType(at: first.socketPath) == S_IFSOCK)

            // The first server still serves old and new connections.
            try await early.expectQuiet()
            let late = try await first.connect("late")
            try await late.subscribe("org.example.still", subscriptionID: 1, requestID: 1)
            #expect(try await early.postAcked("org.example.still", requestID: 1).deliveredCount == 1)
        } catch {
            first.abandon()
            throw error
        }
        try await first.stop()
        #expect(fileType(at: first.socketPath) == nil)
    }

    @Test("A server whose run() fails at startup does not leak its event loop thread")
    func failedStartReleasesEventLoopThread() async throws {
        // Control: a server that ran and stopped releases its thread (so the check below can tell).
        let normal = try await TestServer.start()
        let normalPrefix = try eventLoopThreadPrefix(of: normal.server)
        #expect(threadNames().contains { $0.hasPrefix(normalPrefix) })
        try await normal.stop()
        try await waitUntilNoThread(prefix: normalPrefix, "the stopped server's event loop thread to exit")

        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        let path = directory + "/notifyd.sock"
        #expect(FileManager.default.createFile(atPath: path, contents: Data("in the way".utf8)))
        let server = NotifyServer(configuration: TestServer.configuration(path: path), logger: TestServer.logger)
        let prefix = try eventLoopThreadPrefix(of: server)
        #expect(threadNames().contains { $0.hasPrefix(prefix) })
        await #expect(throws: ServerError.self) { try await server.run() }
        try await waitUntilNoThread(prefix: prefix, "the event loop thread of a server whose run() threw to exit")
    }
}
