import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// The daemon binds only in a directory no other user can have prepared: the `/tmp/notifyd-UID` hijack (another
/// user creates the directory first, or makes it a link to one of theirs, and receives the posts).
@Suite("Socket directory trust", .timeLimit(.minutes(TestScale.minutes(2))))
struct SocketDirectoryTrustTests {
    /// Starting a server on `directory/notifyd.sock` must fail, naming `why`.
    private static func expectRefused(in directory: String, because why: String) async {
        let error = await #expect(throws: ServerError.self) {
            let server = try await TestServer.start(in: directory)
            server.abandon()
        }
        guard case .socketSetupFailed(_, let reason) = error else {
            Issue.record("expected socketSetupFailed, got \(String(describing: error))")
            return
        }
        #expect(reason.contains(why), "\(reason)")
        #expect(reason.contains("another user could receive your clients' notifications"), "\(reason)")
        #expect(fileType(at: directory + "/notifyd.sock") == nil, "nothing was bound there")
    }

    @Test("A socket directory that belongs to another user is refused")
    func otherOwner() async throws {
        let base = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(base) }
        let directory = base + "/notifyd-victim"
        try #require(mkdir(directory, 0o755) == 0)
        // Another user made it first (the test runs as root, so it can hand it over).
        try #require(geteuid() == 0, "this test needs root to give a directory to another user")
        try #require(chown(directory, 1_001, 1_001) == 0)
        await Self.expectRefused(in: directory, because: "belongs to uid 1001, not to you (uid 0)")
    }

    @Test("A socket directory reached through a symbolic link is refused")
    func symbolicLink() async throws {
        let base = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(base) }
        try #require(mkdir(base + "/elsewhere", 0o755) == 0)
        try #require(symlink(base + "/elsewhere", base + "/notifyd-victim") == 0)
        await Self.expectRefused(in: base + "/notifyd-victim", because: "is a symbolic link")
        #expect(fileType(at: base + "/elsewhere/notifyd.sock") == nil)
    }

    @Test("A socket directory other users may write to is refused, unless it is root's and sticky like /tmp")
    func writableByOthers() async throws {
        let base = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(base) }
        let open = base + "/open"
        try #require(mkdir(open, 0o755) == 0 && chmod(open, 0o777) == 0)
        await Self.expectRefused(in: open, because: "can be written by other users (mode 777)")

        let sticky = base + "/sticky"
        try #require(mkdir(sticky, 0o755) == 0 && chmod(sticky, 0o1777) == 0)
        let server = try await TestServer.start(in: sticky)
        do {
            try await server.connect("sticky").expectQuiet()
        } catch {
            server.abandon()
            throw error
        }
        try await server.stop()
    }
}
