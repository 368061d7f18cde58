#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport
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

        @Test("state watch prints the current values, then each value set, with its setter")
        func stateWatch() async throws {
            try await withDaemon { scope, _ in
                let socket = ["--socket", scope.socketPath]
                let before = try await scope.run(.notifyctl, ["state", "set", "com.example.a", "5"] + socket)
                #expect(before.termination == .exited(0), "\(before.diagnostics)")
                let watch = try scope.launch(
                    .notifyctl, ["state", "watch", "com.example.>", "--current", "--count", "3"] + socket)
                try await watch.waitForLine(containing: "watching", on: .stderr)
                // A post is not a state change: it prints nothing.
                _ = try await scope.run(.notifyctl, ["post", "com.example.b", "x"] + socket)
                let set = try await scope.run(.notifyctl, ["state", "set", "com.example.b", "7"] + socket)
                _ = try await scope.run(.notifyctl, ["state", "set", "other.c", "1"] + socket)
                let last = try await scope.run(.notifyctl, ["state", "set", "com.example.a", "18446744073709551615"] + socket)
                #expect(try await watch.waitForExit() == .exited(0), "\(watch.diagnostics)")
                #expect(
                    watch.stdoutLines == [
                        "com.example.a 5 current", "com.example.b 7 (pid \(set.pid) uid \(getuid()))",
                        "com.example.a 18446744073709551615 (pid \(last.pid) uid \(getuid()))",
                    ], "\(watch.diagnostics)")
                let bad = try await scope.run(.notifyctl, ["state", "watch", "a..b"] + socket)
                #expect(bad.termination == .exited(1) && bad.stderrText.contains("invalid name 'a..b'"), "\(bad.diagnostics)")
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
                // An instant in UTC: date, time with milliseconds, and the zone.
                let time = try object.string("time")
                #expect(time.hasSuffix("Z") && time.count == "2026-11-24T06:11:34.123Z".count, "\(time)")
                #expect((try? Date(time, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))) != nil, "\(time)")
                #expect(try object.int("merged") == 0)
                #expect(try object.int("dropped_before") == 0)
                #expect(try object.bool("retained") == false)
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

        @Test(
            "--socket before the subcommand, as systemctl and busctl take it, or after it",
            arguments: [SocketPlacement.before, .beforeWithEquals, .after])
        func socketPlacement(placement: SocketPlacement) async throws {
            try await withDaemon { scope, daemon in
                let status = try await scope.run(.notifyctl, placement.arguments(["status"], socket: scope.socketPath))
                #expect(status.termination == .exited(0), "\(status.diagnostics)")
                let pidRow = status.stdoutLines.first { $0.hasPrefix("pid ") }
                #expect(pidRow?.hasSuffix(" \(daemon.pid)") == true, "\(status.diagnostics)")

                let listen = try scope.launch(
                    .notifyctl, placement.arguments(["listen", "com.example.order", "--count", "1"], socket: scope.socketPath))
                try await listen.waitForLine(containing: "listening", on: .stderr)

                let names = try await scope.run(.notifyctl, placement.arguments(["names"], socket: scope.socketPath))
                #expect(names.termination == .exited(0), "\(names.diagnostics)")
                #expect(names.stdoutLines.contains { $0.hasSuffix(" com.example.order") }, "\(names.diagnostics)")
                let clients = try await scope.run(.notifyctl, placement.arguments(["clients"], socket: scope.socketPath))
                #expect(clients.termination == .exited(0), "\(clients.diagnostics)")
                #expect(clients.stdoutLines.contains { $0.hasPrefix(pad(listen.pid, 7)) }, "\(clients.diagnostics)")

                let post = try await scope.run(
                    .notifyctl, placement.arguments(["post", "com.example.order", "hi", "--wait"], socket: scope.socketPath))
                #expect(post.termination == .exited(0), "\(post.diagnostics)")
                #expect(post.stdoutLines.first?.hasPrefix("delivered to 1 subscriber") == true, "\(post.diagnostics)")
                #expect(try await listen.waitForExit() == .exited(0), "\(listen.diagnostics)")
                #expect(listen.stdoutLines.first?.hasSuffix(" hi") == true, "\(listen.diagnostics)")

                // Two levels of subcommand: set in this placement, read back in every one (and between the levels).
                let set = try await scope.run(
                    .notifyctl, placement.arguments(["state", "set", "com.example.order", "41"], socket: scope.socketPath))
                #expect(set.termination == .exited(0), "\(set.diagnostics)")
                for arguments in [
                    ["--socket", scope.socketPath, "state", "get", "com.example.order"],
                    ["state", "--socket", scope.socketPath, "get", "com.example.order"],
                    ["state", "get", "com.example.order", "--socket", scope.socketPath],
                ] {
                    let get = try await scope.run(.notifyctl, arguments)
                    #expect(get.termination == .exited(0), "\(get.diagnostics)")
                    #expect(get.stdoutLines == ["41"], "\(get.diagnostics)")
                }
            }
        }

        @Test(
            "--socket without a value, or given twice, is a usage error that says so",
            arguments: [
                (["--socket"], "--socket needs a value"),
                (["--socket="], "--socket needs a value"),
                (["--socket", "status"], "--socket needs a value"),
                (["status", "--socket"], "--socket needs a value"),
                (["--socket", "SOCKET"], "needs a subcommand"),
                (["--socket", "SOCKET", "status", "--socket", "SOCKET"], "--socket given twice"),
                (["--socket", "SOCKET", "--socket=SOCKET", "status"], "--socket given twice"),
                (["status", "--socket", "SOCKET", "--socket", "SOCKET"], "--socket given twice"),
                (["--socket", "SOCKET", "state", "--socket", "SOCKET", "get", "x"], "--socket given twice"),
            ])
        func socketMisuse(arguments: [String], message: String) async throws {
            try await withDaemon { scope, _ in
                let given = arguments.map { $0.replacingOccurrences(of: "SOCKET", with: scope.socketPath) }
                let result = try await scope.run(.notifyctl, given)
                #expect(result.termination == .exited(64), "a usage error (EX_USAGE)\n\(result.diagnostics)")
                #expect(result.stderrText.contains(message), "\(result.diagnostics)")
                #expect(result.stdoutLines.isEmpty, "\(result.diagnostics)")
            }
        }

        @Test("--help shows --socket at the top level and in the subcommands")
        func socketInHelp() async throws {
            try await withIntegrationScope { scope in
                let top = try await scope.run(.notifyctl, ["--help"])
                #expect(top.termination == .exited(0), "\(top.diagnostics)")
                #expect(top.stdoutLines.contains { $0.contains("notifyctl [--socket <path>] <subcommand>") }, "\(top.diagnostics)")
                for command in [["status"], ["listen"], ["state", "get"]] {
                    let help = try await scope.run(.notifyctl, command + ["--help"])
                    #expect(help.termination == .exited(0), "\(help.diagnostics)")
                    #expect(help.stdoutLines.contains { $0.contains("--socket <path>") }, "\(help.diagnostics)")
                }
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

/// Where a test puts `--socket PATH` on notifyctl's command line.
enum SocketPlacement: Sendable, CustomTestStringConvertible {
    case before
    case beforeWithEquals
    case after

    /// `command` with the socket option placed; the option goes before or after the whole subcommand path.
    func arguments(_ command: [String], socket: String) -> [String] {
        switch self {
        case .before: ["--socket", socket] + command
        case .beforeWithEquals: ["--socket=\(socket)"] + command
        case .after: command + ["--socket", socket]
        }
    }

    var testDescription: String {
        switch self {
        case .before: "notifyctl --socket PATH COMMAND"
        case .beforeWithEquals: "notifyctl --socket=PATH COMMAND"
        case .after: "notifyctl COMMAND --socket PATH"
        }
    }
}

/// Right-aligns `value` in `width` columns, as `notifyctl clients` prints its PID column.
private func pad(_ value: some BinaryInteger, _ width: Int) -> String {
    let text = "\(value)"
    return String(repeating: " ", count: max(0, width - text.count)) + text
}
