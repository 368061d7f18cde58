#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport
import Testing

extension Integration {
    /// The `notifyctl` commands beyond post and listen, with the real binaries: state, retained values, patterns,
    /// introspection with `--json`.
    @Suite("notifyctl state, retained values, patterns and introspection")
    struct NotifyctlIntrospectionTests {
        @Test("notifyctl state set/get: round trip, unset, JSON, refused for another user's names")
        func stateCommands() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startOpenDaemon(["--socket-mode", "666"])
                let socket = ["--socket", scope.socketPath]
                let unset = try await scope.run(.notifyctl, ["state", "get", "org.example.level"] + socket)
                #expect(unset.termination == .exited(0) && unset.stdoutLines == ["unset"], "\(unset.diagnostics)")
                let set = try await scope.run(.notifyctl, ["state", "set", "org.example.level", "18446744073709551615"] + socket)
                #expect(set.termination == .exited(0), "\(set.diagnostics)")
                let get = try await scope.run(.notifyctl, ["state", "get", "org.example.level"] + socket)
                #expect(get.stdoutLines == ["18446744073709551615"], "\(get.diagnostics)")
                let json = try await scope.run(.notifyctl, ["state", "get", "org.example.level", "--json"] + socket)
                #expect(json.stdoutLines == [#"{"name":"org.example.level","state":18446744073709551615}"#], "\(json.diagnostics)")
                let jsonUnset = try await scope.run(.notifyctl, ["state", "get", "org.example.none", "--json"] + socket)
                #expect(jsonUnset.stdoutLines == [#"{"name":"org.example.none","state":null}"#], "\(jsonUnset.diagnostics)")
                let invalid = try await scope.run(.notifyctl, ["state", "set", "org..x", "1"] + socket)
                #expect(invalid.termination == .exited(1), "\(invalid.diagnostics)")
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("notifyctl post --retain and listen --current: the retained value first, then newer ones")
        func retainAndCurrent() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startOpenDaemon([])
                let socket = ["--socket", scope.socketPath]
                let first = try await scope.run(.notifyctl, ["post", "org.example.mode", "dark", "--retain", "--wait"] + socket)
                #expect(first.termination == .exited(0), "\(first.diagnostics)")
                _ = try await scope.run(.notifyctl, ["post", "org.example.mode", "not retained"] + socket)

                let current = try scope.launch(.notifyctl, ["listen", "org.example.mode", "--current", "--json", "--count", "2"] + socket)
                let plain = try scope.launch(.notifyctl, ["listen", "org.example.mode", "--json", "--count", "1"] + socket)
                try await current.waitForLine(containing: "listening for", on: .stderr)
                try await plain.waitForLine(containing: "listening for", on: .stderr)
                let lines = try await current.waitForStdoutLines(1).map(ListenLine.init)
                #expect(lines.first?.payload == "dark" && lines.first?.retained == true, "\(lines)")
                #expect(plain.stdoutLines.isEmpty, "without --current nothing comes before a new post\n\(plain.diagnostics)")

                _ = try await scope.run(.notifyctl, ["post", "org.example.mode", "light"] + socket)
                #expect(try await current.waitForExit() == .exited(0), "\(current.diagnostics)")
                #expect(try await plain.waitForExit() == .exited(0), "\(plain.diagnostics)")
                let all = try current.stdoutLines.map(ListenLine.init)
                #expect(all.map(\.payload) == ["dark", "light"])
                #expect(all.map(\.retained) == [true, false])
                #expect(try plain.stdoutLines.map(ListenLine.init).map(\.payload) == ["light"])
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("notifyctl listen with patterns: '>' and '*' select the right names, and each notification is printed once")
        func listenPatterns() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startOpenDaemon([])
                let socket = ["--socket", scope.socketPath]
                // Overlapping exact and pattern observations in one process.
                let listen = try scope.launch(
                    .notifyctl, ["listen", "org.example.>", "*.example.disk", "org.example.disk", "--json"] + socket)
                try await listen.waitForLine(containing: "listening for", on: .stderr)
                let names = ["org.example.disk", "org.other.disk", "net.example.disk", "org.example", "org.example.a.b", "org.example.end"]
                for name in names {
                    let post = try await scope.run(.notifyctl, ["post", name, name, "--wait"] + socket)
                    #expect(post.termination == .exited(0), "\(post.diagnostics)")
                    let expected = ["org.other.disk", "org.example"].contains(name) ? 0 : 1
                    #expect(try deliveredCount(fromPostOutput: post.stdoutLines) == expected, "\(name): one connection")
                }
                try await listen.waitForLine(containing: "org.example.end", on: .stdout)
                listen.send(SIGTERM)
                _ = try await listen.waitForExit()
                let printed = try listen.stdoutLines.map(ListenLine.init).map(\.name)
                #expect(
                    printed == ["org.example.disk", "net.example.disk", "org.example.a.b", "org.example.end"],
                    "one line per notification, whatever number of the listed names match it\n\(listen.diagnostics)")
                let invalid = try await scope.run(.notifyctl, ["listen", "a.>.b", "--count", "1"] + socket)
                #expect(invalid.termination == .exited(1), "\(invalid.diagnostics)")
                #expect(invalid.stderrText.contains("a.>.b"), "\(invalid.diagnostics)")
                try await scope.stopDaemon(daemon)
            }
        }

        /// `notifyctl status --json`, asked until it reports `connections` open connections: notifyctl processes that
        /// have exited close their connections, and the daemon notices that on its own time (nothing replies to it).
        static func statusOnceSettled(_ scope: IntegrationScope, connections: Int) async throws -> JSONObject {
            var last = ""
            let settled = try await poll(
                "the daemon to report \(connections) connections (it last reported: \(last))", timeout: 20,
                interval: .milliseconds(50)
            ) {
                let status = try await scope.run(.notifyctl, ["status", "--json", "--socket", scope.socketPath])
                guard status.termination == .exited(0), let line = status.stdoutLines.first else {
                    throw TestFailure("notifyctl status --json failed\n\(status.diagnostics)")
                }
                last = line
                return try JSONObject(line: line).int("connections") == connections ? line : nil
            }
            return try JSONObject(line: settled)
        }

        @Test("notifyctl status, names [PATTERN] and clients with --json")
        func introspection() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startOpenDaemon([])
                let socket = ["--socket", scope.socketPath]
                let listen = try scope.launch(.notifyctl, ["listen", "org.example.watched", "org.example.>", "--policy", "queue:5"] + socket)
                try await listen.waitForLine(containing: "listening for", on: .stderr)
                _ = try await scope.run(.notifyctl, ["state", "set", "org.example.level", "5"] + socket)
                _ = try await scope.run(.notifyctl, ["post", "org.example.mode", "x", "--retain"] + socket)
                _ = try await scope.run(.notifyctl, ["post", "net.example.other", "x", "--retain"] + socket)

                let object = try await Self.statusOnceSettled(scope, connections: 2)
                let version = try await scope.run(.notifyd, ["--version"])
                #expect(try object.string("version") == version.stdoutLines.first, "\(object.line)")
                #expect(try object.int("pid") == Int(daemon.pid))
                #expect(try object.string("instance_id").count == 32)
                #expect(try object.int("connections") == 2, "the listener and status itself")
                #expect(try object.int("subscriptions") == 2)
                #expect(try object.int("subscribed_names") == 1)
                #expect(try object.int("patterns") == 1)
                #expect(try object.int("state_names") == 1)
                #expect(try object.int("retained_names") == 2)
                #expect(try object.int("posts") == 2)
                #expect(try object.int("deliveries") == 1)
                for key in ["uptime_seconds", "posts_per_second", "deliveries_per_second"] {
                    #expect(object.fields[key] is NSNumber, "\(key) in \(object.line)")
                }
                for key in ["merged", "dropped", "slow_consumer_disconnects", "outbound_bytes", "held_bytes"] {
                    #expect(try object.int(key) == 0, "\(key)")
                }
                #expect(try object.int("resident_memory_bytes") > 0)

                let names = try await scope.run(.notifyctl, ["names", "org.example.>", "--json"] + socket)
                #expect(names.termination == .exited(0), "\(names.diagnostics)")
                let list = try jsonArray(printedBy: names)
                #expect(list.compactMap { $0["name"] as? String } == ["org.example.level", "org.example.mode", "org.example.watched"])
                #expect(list.map { $0["state"] as? Int } == [5, nil, nil])
                #expect(list.map { $0["has_retained"] as? Bool } == [false, true, false])
                #expect(list.map { $0["subscribers"] as? Int } == [0, 0, 1])
                let human = try await scope.run(.notifyctl, ["names"] + socket)
                #expect(human.stdoutLines.count == 1 + 4, "a header and four names\n\(human.diagnostics)")

                let clients = try await scope.run(.notifyctl, ["clients", "--json"] + socket)
                let entries = try jsonArray(printedBy: clients)
                #expect(entries.allSatisfy { ($0["uid"] as? Int) == Int(getuid()) })
                let listener = try #require(entries.first { ($0["pid"] as? Int) == Int(listen.pid) })
                #expect(listener["command"] as? String == "notifyctl")
                #expect(listener["client_name"] as? String == "notifyctl")
                #expect(listener["subscriptions"] as? Int == 2)
                #expect(listener["suspended"] as? Bool == false)
                #expect(listener["uid"] as? Int == Int(getuid()))
                #expect(entries.contains { ($0["pid"] as? Int) == Int(clients.pid) }, "the asking client lists itself")
                listen.send(SIGTERM)
                _ = try await listen.waitForExit()
                try await scope.stopDaemon(daemon)
            }
        }
    }
}

