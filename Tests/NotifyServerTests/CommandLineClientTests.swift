#if canImport(Glibc)
import Glibc
#endif
import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Synchronization
import Testing

@testable import NotifyServer

/// Access rules as a user meets them: `notifyctl` run as another uid (`setpriv`) against an in-process
/// server configured with reserved prefixes and quotas (`notifyd` itself has no `--config` option yet).
@Suite("Notifyctl as another uid", .timeLimit(.minutes(TestScale.minutes(1))))
struct CommandLineClientTests {
    static let nobody = PeerIdentity(uid: 65_534, gid: 65_534)

    static let configuration = """
        # notifyctl tests
        reserve org.freedesktop.network.> owner=root group=root post=owner observe=all
        reserve com.example.secret owner=4201 group=4300 post=owner observe=group
        """

    @Test("a refused post or state change makes notifyctl fail with the daemon's message naming the rule")
    func refusedPost() async throws {
        let access = try parseAccess(Self.configuration)
        try await withServer(everyUser: true, { $0.access = access }) { server in
            let post = try await CommandRun.notifyctl(["post", "org.freedesktop.network.up", "x", "--socket", server.socketPath], as: Self.nobody)
            #expect(post.status == 1, "\(post)")
            #expect(
                post.stderr.contains(
                    "notifyd rejected the request (permission-denied): permission denied: only "),
                "\(post)")
            #expect(
                post.stderr.contains(
                    "root may post names under 'org.freedesktop.network' (rule at test.conf:2); you are uid 65534"),
                "\(post)")
            let state = try await CommandRun.notifyctl(
                ["state", "set", "org.freedesktop.network.up", "1", "--socket", server.socketPath], as: Self.nobody)
            #expect(state.status == 1, "\(state)")
            #expect(state.stderr.contains("may set the state of names under 'org.freedesktop.network' (rule at test.conf:2)"), "\(state)")
            let get = try await CommandRun.notifyctl(
                ["state", "get", "com.example.secret.key", "--socket", server.socketPath], as: Self.nobody)
            #expect(get.status == 1, "\(get)")
            #expect(get.stderr.contains("you may not observe names under 'com.example.secret' (rule at test.conf:3)"), "\(get)")
            let allowed = try await CommandRun.notifyctl(["post", "org.example.x", "--socket", server.socketPath], as: Self.nobody)
            #expect(allowed.status == 0, "\(allowed)")
        }
    }

    @Test("a refused subscription makes notifyctl listen fail at once, naming the rule")
    func refusedListen() async throws {
        let access = try parseAccess(Self.configuration)
        try await withServer(everyUser: true, { $0.access = access }) { server in
            let listen = try await CommandRun.notifyctl(
                ["listen", "com.example.secret.key", "--count", "1", "--timeout", "5", "--socket", server.socketPath], as: Self.nobody)
            #expect(listen.status != 0, "\(listen)")
            #expect(listen.stderr.contains("permission-denied"), "the user must learn why nothing arrives\n\(listen)")
            #expect(listen.stderr.contains("(rule at test.conf:3)"), "\(listen)")
            #expect(!listen.stderr.contains("timed out"), "refused at once, not after waiting for notifications\n\(listen)")
        }
    }

    @Test("a connection beyond connections-per-uid makes notifyctl fail with quota-exceeded, not a timeout")
    func connectionQuota() async throws {
        try await withServer(everyUser: true, { $0.access.quotas.connectionsPerUID = 2 }) { server in
            let held = [
                try await server.connect("nobody-1", as: Self.nobody),
                try await server.connect("nobody-2", as: Self.nobody),
            ]
            let post = try await CommandRun.notifyctl(["post", "org.example.x", "--socket", server.socketPath], as: Self.nobody)
            #expect(post.status == 1, "\(post)")
            #expect(post.stderr.contains("quota-exceeded"), "\(post)")
            #expect(post.stderr.contains("uid 65534 already has the maximum of 2 connections"), "\(post)")
            #expect(post.seconds < 5, "the refusal is immediate: \(post.seconds) s")
            withExtendedLifetime(held) {}
        }
    }
}

/// One finished run of a tool from the build's products directory.
struct CommandRun: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String
    var seconds: Double
    var commandLine: String

    var description: String {
        "\(commandLine): exit \(status) after \(seconds) s\n  stdout: \(stdout)\n  stderr: \(stderr)"
    }

    /// The directory holding the built executables: the one holding this test bundle.
    static func productsDirectory() throws -> URL {
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var directory = URL(fileURLWithPath: executable).deletingLastPathComponent()
        for _ in 0..<4 {
            if FileManager.default.isExecutableFile(atPath: directory.appendingPathComponent("notifyctl").path) { return directory }
            directory.deleteLastPathComponent()
        }
        throw TestFailure("cannot find the notifyctl executable near \(executable): build with `swift build --build-tests`")
    }

    /// Runs `notifyctl arguments` as `identity` (through `setpriv`), failing after `timeout` seconds.
    static func notifyctl(_ arguments: [String], as identity: PeerIdentity, timeout: Double = 20) async throws -> CommandRun {
        let notifyctl = try productsDirectory().appendingPathComponent("notifyctl").path
        let full = CredentialSwitch.setprivArguments(identity, running: [notifyctl] + arguments)
        let commandLine = ([CredentialSwitch.setprivURL.path] + full).joined(separator: " ")
        return try await withTimeout(timeout, "\(commandLine) to finish") {
            try await withCheckedThrowingContinuation { continuation in
                let thread = Thread {
                    continuation.resume(with: Result {
                        let started = Date()
                        let run = try SpawnedProcess.run(executable: CredentialSwitch.setprivURL.path, arguments: full)
                        // As a shell reports it: 128 + the signal for a killed process.
                        let status: Int32 = switch run.termination {
                        case .exited(let status): status
                        case .signaled(let signal): 128 + signal
                        case .unknown: -1
                        }
                        return CommandRun(
                            status: status, stdout: String(decoding: run.stdout, as: UTF8.self),
                            stderr: String(decoding: run.stderr, as: UTF8.self),
                            seconds: Date().timeIntervalSince(started), commandLine: commandLine)
                    })
                }
                thread.start()
            }
        }
    }
}
