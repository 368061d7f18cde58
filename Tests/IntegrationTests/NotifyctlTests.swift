#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing

extension Integration {
    /// `notifyctl post` and `notifyctl listen` against a real daemon, as a user would run them in two terminals.
    @Suite("notifyctl")
    struct NotifyctlTests {
        @Test("listen in one terminal, post in another")
        func listenThenPost() async throws {
            try await withDaemon { scope, _ in
                let listen = try scope.launch(
                    .notifyctl, ["listen", "com.example.hello", "--count", "1", "--socket", scope.socketPath])
                try await listen.waitForLine(containing: "listening", on: .stderr)

                let post = try await scope.run(.notifyctl, ["post", "com.example.hello", "hi", "--socket", scope.socketPath])
                #expect(post.termination == .exited(0), "\(post.diagnostics)")
                #expect(post.stdoutLines.isEmpty, "post without --wait prints nothing\n\(post.diagnostics)")

                let listenEnd = try await listen.waitForExit()
                #expect(listenEnd == .exited(0), "\(listen.diagnostics)")
                let lines = listen.stdoutLines
                #expect(lines.count == 1, "\(listen.diagnostics)")
                let line = try #require(lines.first)
                #expect(line.contains("com.example.hello"), "\(line)")
                #expect(line.hasSuffix(" hi"), "\(line)")
                #expect(line.contains("[pid \(post.pid) uid \(getuid())]"), "\(line)")
            }
        }

        @Test("listen --json prints one JSON object per notification")
        func listenJSON() async throws {
            try await withDaemon { scope, _ in
                let listen = try scope.launch(
                    .notifyctl, ["listen", "com.example.json", "--count", "1", "--json", "--socket", scope.socketPath])
                try await listen.waitForLine(containing: "listening", on: .stderr)

                let post = try await scope.run(.notifyctl, ["post", "com.example.json", "hi", "--socket", scope.socketPath])
                #expect(post.termination == .exited(0), "\(post.diagnostics)")

                let listenEnd = try await listen.waitForExit()
                #expect(listenEnd == .exited(0), "\(listen.diagnostics)")
                #expect(listen.stdoutLines.count == 1, "\(listen.diagnostics)")
                let object = try JSONObject(line: try #require(listen.stdoutLines.first))
                #expect(try object.string("name") == "com.example.json")
                #expect(try object.string("payload") == "hi")
                #expect(try object.int("pid") == Int(post.pid))
                #expect(try object.int("uid") == Int(getuid()))
                #expect(try object.int("gid") == Int(getgid()))
                #expect(try object.int("sequence") >= 1)
                #expect(try !object.string("time").isEmpty)
            }
        }

        @Test("post --wait reports how many subscribers got the notification")
        func postWait() async throws {
            try await withDaemon { scope, _ in
                let nobody = try await scope.run(
                    .notifyctl, ["post", "com.example.wait", "x", "--wait", "--socket", scope.socketPath])
                #expect(nobody.termination == .exited(0), "\(nobody.diagnostics)")
                #expect(nobody.stdoutLines.first?.hasPrefix("delivered to 0 subscribers") == true, "\(nobody.diagnostics)")

                let listen = try scope.launch(
                    .notifyctl, ["listen", "com.example.wait", "--count", "1", "--socket", scope.socketPath])
                try await listen.waitForLine(containing: "listening", on: .stderr)

                let post = try await scope.run(
                    .notifyctl, ["post", "com.example.wait", "hi", "--wait", "--socket", scope.socketPath])
                #expect(post.termination == .exited(0), "\(post.diagnostics)")
                let line = try #require(post.stdoutLines.first, "\(post.diagnostics)")
                #expect(line.hasPrefix("delivered to 1 subscriber ("), "\(line)")

                let listenEnd = try await listen.waitForExit()
                #expect(listenEnd == .exited(0), "\(listen.diagnostics)")
                #expect(listen.stdoutLines.first?.hasSuffix(" hi") == true, "\(listen.diagnostics)")
            }
        }

        @Test("without a daemon, listen and post fail with a clear message", arguments: ["listen", "post"])
        func daemonNotRunning(command: String) async throws {
            try await withIntegrationScope { scope in
                let missing = scope.directory + "/missing.sock"
                let result = try await scope.run(.notifyctl, [command, "com.example.x", "--socket", missing])
                #expect(result.termination != .exited(0), "\(result.diagnostics)")
                if case .signaled = result.termination {
                    Issue.record("notifyctl \(command) crashed instead of failing\n\(result.diagnostics)")
                }
                #expect(result.stderrText.contains("cannot connect to notifyd at \(missing)"), "\(result.diagnostics)")
                #expect(result.stderrText.contains("is the daemon running?"), "\(result.diagnostics)")
                #expect(result.stdoutLines.isEmpty, "\(result.diagnostics)")
            }
        }

        @Test(
            "post rejects an invalid name and names the offending character",
            arguments: [("bad name", "U+20"), ("bad/name", "'/'"), ("bad*name", "'*'")])
        func invalidName(name: String, character: String) async throws {
            try await withDaemon { scope, _ in
                let post = try await scope.run(.notifyctl, ["post", name, "--socket", scope.socketPath])
                #expect(post.termination == .exited(1), "\(post.diagnostics)")
                #expect(post.stderrText.contains("invalid name '\(name)'"), "\(post.diagnostics)")
                #expect(post.stderrText.contains("character \(character)"), "\(post.diagnostics)")
            }
        }

        @Test("listen --count with --timeout fails when too few notifications arrive")
        func listenTimeout() async throws {
            try await withDaemon { scope, _ in
                let listen = try await scope.run(
                    .notifyctl,
                    ["listen", "com.example.quiet", "--count", "1", "--timeout", "0.5", "--socket", scope.socketPath])
                #expect(listen.termination == .exited(1), "\(listen.diagnostics)")
                #expect(listen.stderrText.contains("timed out"), "\(listen.diagnostics)")
                #expect(listen.stdoutLines.isEmpty, "\(listen.diagnostics)")
            }
        }
    }
}
