#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyWire
import NotifyTestSupport
import Testing

extension Integration {
    /// Access control with the real daemon and clients of different uids: `notifyctl` run through
    /// `setpriv` as uid 65534 (nobody) and 1001, raw connections whose thread takes another uid for `connect(2)`.
    @Suite("Clients of different uids")
    struct UIDTests {
        static let nobody: (uid: UInt32, gid: UInt32) = (65_534, 65_534)
        static let other: (uid: UInt32, gid: UInt32) = (1_001, 1_001)

        @Test("user.<uid>. names: the owner and root may post and observe, another uid is refused both, naming the built-in rule")
        func userNames() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startOpenDaemon(["--socket-mode", "666"])
                let socket = ["--socket", scope.socketPath]
                let refusedListen = try await scope.runAs(
                    uid: Self.other.uid, gid: Self.other.gid, .notifyctl, ["listen", "user.65534.>", "--count", "1"] + socket)
                #expect(refusedListen.termination == .exited(1), "\(refusedListen.diagnostics)")
                #expect(
                    refusedListen.stderrText.contains(
                        "only uid 65534 and root may observe names under 'user.65534' (built-in rule); you are uid 1001"),
                    "\(refusedListen.diagnostics)")
                let listen = try scope.launchAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["listen", "user.65534.>", "--json", "--count", "2"] + socket)
                try await listen.waitForLine(containing: "listening for", on: .stderr)

                let own = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["post", "user.65534.inbox", "from nobody"] + socket)
                #expect(own.termination == .exited(0), "\(own.diagnostics)")
                let denied = try await scope.runAs(
                    uid: Self.other.uid, gid: Self.other.gid, .notifyctl, ["post", "user.65534.inbox", "from 1001"] + socket)
                #expect(denied.termination == .exited(1), "\(denied.diagnostics)")
                #expect(
                    denied.stderrText.contains(
                        "permission-denied): permission denied: only uid 65534 and root may post names under 'user.65534.' (built-in rule); you are uid 1001"),
                    "\(denied.diagnostics)")
                let byRoot = try await scope.run(.notifyctl, ["post", "user.65534.inbox", "from root"] + socket)
                #expect(byRoot.termination == .exited(0), "\(byRoot.diagnostics)")

                #expect(try await listen.waitForExit() == .exited(0), "\(listen.diagnostics)")
                let lines = try listen.stdoutLines.map(ListenLine.init)
                #expect(lines.map(\.payload) == ["from nobody", "from root"], "the refused post reached nobody")
                #expect(lines.map(\.uid) == [65_534, 0], "sender uids from the kernel")

                // The same rule for state values, which only the owner and root may read.
                let setOwn = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["state", "set", "user.65534.level", "3"] + socket)
                #expect(setOwn.termination == .exited(0), "\(setOwn.diagnostics)")
                let setOther = try await scope.runAs(
                    uid: Self.other.uid, gid: Self.other.gid, .notifyctl, ["state", "set", "user.65534.level", "4"] + socket)
                #expect(setOther.termination == .exited(1), "\(setOther.diagnostics)")
                #expect(setOther.stderrText.contains("may set the state of names under 'user.65534.' (built-in rule)"), "\(setOther.diagnostics)")
                let get = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["state", "get", "user.65534.level"] + socket)
                #expect(get.stdoutLines == ["3"], "\(get.diagnostics)")
                let getOther = try await scope.runAs(
                    uid: Self.other.uid, gid: Self.other.gid, .notifyctl, ["state", "get", "user.65534.level"] + socket)
                #expect(getOther.termination == .exited(1), "\(getOther.diagnostics)")
                let setOwn1001 = try await scope.runAs(
                    uid: Self.other.uid, gid: Self.other.gid, .notifyctl, ["state", "set", "user.1001.level", "5"] + socket)
                #expect(setOwn1001.termination == .exited(0), "\(setOwn1001.diagnostics)")
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("clients: root sees every connection, another uid only its own; status and names are open to everyone")
        func clientsVisibility() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startOpenDaemon(["--socket-mode", "666"])
                let socket = ["--socket", scope.socketPath]
                let rootListener = try scope.launch(.notifyctl, ["listen", "org.example.root"] + socket)
                let nobodyListener = try scope.launchAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["listen", "org.example.nobody"] + socket)
                defer { nobodyListener.send(SIGKILL) }
                try await rootListener.waitForLine(containing: "listening for", on: .stderr)
                try await nobodyListener.waitForLine(containing: "listening for", on: .stderr)

                let asOther = try await scope.runAs(uid: Self.other.uid, gid: Self.other.gid, .notifyctl, ["clients", "--json"] + socket)
                let seenByOther = try jsonArray(printedBy: asOther)
                #expect(seenByOther.map { $0["uid"] as? Int } == [1_001], "only its own connection\n\(asOther.diagnostics)")
                #expect(seenByOther.first?["pid"] as? Int != Int(rootListener.pid))

                let asNobody = try await scope.runAs(uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["clients", "--json"] + socket)
                let seenByNobody = try jsonArray(printedBy: asNobody)
                #expect(seenByNobody.allSatisfy { $0["uid"] as? Int == 65_534 }, "\(asNobody.diagnostics)")
                #expect(seenByNobody.contains { $0["subscriptions"] as? Int == 1 }, "nobody's listener is listed")
                #expect(seenByNobody.count == 2)

                let asRoot = try await scope.run(.notifyctl, ["clients", "--json"] + socket)
                let seenByRoot = try jsonArray(printedBy: asRoot)
                let uids = Set(seenByRoot.compactMap { $0["uid"] as? Int })
                #expect(uids.isSuperset(of: [0, 65_534]), "root sees every uid: \(uids)")
                #expect(seenByRoot.contains { $0["pid"] as? Int == Int(rootListener.pid) })

                for command in [["status", "--json"], ["names", "--json"]] {
                    let run = try await scope.runAs(uid: Self.other.uid, gid: Self.other.gid, .notifyctl, command + socket)
                    #expect(run.termination == .exited(0), "\(run.diagnostics)")
                }
                let names = try jsonArray(
                    printedBy: try await scope.runAs(uid: Self.other.uid, gid: Self.other.gid, .notifyctl, ["names", "--json"] + socket))
                #expect(names.compactMap { $0["name"] as? String } == ["org.example.nobody", "org.example.root"])
                nobodyListener.send(SIGTERM)
                rootListener.send(SIGTERM)
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("connections-per-uid (default 256): the next connection of that uid gets ERROR quota-exceeded and is closed; another uid and root are not limited")
        func connectionQuota() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startOpenDaemon(["--socket-mode", "666"])
                let path = scope.socketPath
                let other = PeerIdentity(uid: Self.other.uid, gid: Self.other.gid)
                var problems: [String] = []
                // Held by another process (see holdConnections); it fails if one of the 256 gets no WELCOME.
                let held = try await scope.holdConnections(256, namePrefix: "uid-1001-", as: other)
                let refused = try await TestClient.connect(to: path, name: "uid-1001-refused", as: other)
                let (frames, end) = try await refused.framesUntilEnd()
                if case .error(let error)? = frames.first {
                    if error.code != .quotaExceeded || !error.closesConnection || error.requestID != 0 {
                        problems.append("connection 257: \(error)")
                    }
                    if error.message != "uid 1001 already has the maximum of 256 connections (quota connections-per-uid)" {
                        problems.append("connection 257: message '\(error.message)'")
                    }
                } else {
                    problems.append("connection 257 of uid 1001: expected ERROR quota-exceeded, got \(frames.map(\.summary))")
                }
                if frames.count > 1 { problems.append("connection 257: frames after the closing ERROR: \(frames.map(\.summary))") }
                if end != .endOfFile { problems.append("connection 257 ended with \(end)") }
                // Another uid and root are not limited by uid 1001's connections.
                let nobody = try await TestClient.connect(
                    to: path, name: "nobody", as: PeerIdentity(uid: Self.nobody.uid, gid: Self.nobody.gid))
                try await nobody.hello()
                let roots = try await scope.holdConnections(300, namePrefix: "root-")
                let status = try await nobody.query(DaemonStatus.self, .status)
                if status.connections != 256 + 1 + 300 { problems.append("status reports \(status.connections) connections") }
                for holder in [held, roots] {
                    holder.send(SIGKILL)
                    _ = try await holder.waitForExit()
                }
                await nobody.close()
                let outcome = problems
                #expect(outcome.isEmpty, "\(outcome)")
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("--config: reserved prefixes and quotas apply to every uid, denials name the rule, SIGHUP re-reads the file")
        func configurationFile() async throws {
            try await withIntegrationScope { scope in
                let config = scope.directory + "/notifyd.conf"
                try """
                    # access control integration test
                    reserve org.freedesktop.network.> owner=root group=root post=owner observe=all
                    reserve com.example.private owner=65534 group=65534 post=owner observe=owner
                    quota connections-per-uid 3
                    """.write(toFile: config, atomically: true, encoding: .utf8)
                let daemon = try await scope.startOpenDaemon(["--socket-mode", "666", "--config", config])
                defer { daemon.send(SIGKILL) }
                let socket = ["--socket", scope.socketPath]
                let listen = try scope.launchAs(
                    uid: Self.other.uid, gid: Self.other.gid, .notifyctl,
                    ["listen", "org.freedesktop.network.>", "--json", "--count", "1"] + socket)
                try await listen.waitForLine(containing: "listening for", on: .stderr)
                let denied = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["post", "org.freedesktop.network.up"] + socket)
                #expect(denied.termination == .exited(1), "\(denied.diagnostics)")
                #expect(
                    denied.stderrText.contains(
                        "root may post names under 'org.freedesktop.network' (rule at \(config):2); you are uid 65534"),
                    "\(denied.diagnostics)")
                let byRoot = try await scope.run(.notifyctl, ["post", "org.freedesktop.network.up", "eth0"] + socket)
                #expect(byRoot.termination == .exited(0), "\(byRoot.diagnostics)")
                #expect(try await listen.waitForExit() == .exited(0), "everyone may observe\n\(listen.diagnostics)")

                // Observing a prefix reserved with observe=owner, and the connections quota of the file, from raw
                // connections (uid 1002 has no other connection, so the count is exact).
                let path = scope.socketPath
                let rule3 = "(rule at \(config):3)"
                let uid1002 = PeerIdentity(uid: 1_002, gid: 1_002)
                var problems: [String] = []
                let outsider = try await TestClient.connect(to: path, name: "outsider", as: uid1002)
                try await outsider.hello()
                let reply = try await outsider.request {
                    .subscribe(ClientFrame.Subscribe(requestID: $0, subscriptionID: 1, pattern: "com.example.private.x"))
                }.reply
                if case .error(let error) = reply, error.code == .permissionDenied, error.message.contains(rule3) {
                } else {
                    problems.append("SUBSCRIBE com.example.private.x as uid 1002: \(reply.summary)")
                }
                var open = [outsider]
                for index in 0..<2 {
                    let connection = try await TestClient.connect(to: path, name: "uid-1002-\(index)", as: uid1002)
                    try await connection.hello()
                    open.append(connection)
                }
                let refused = try await TestClient.connect(to: path, name: "uid-1002-refused", as: uid1002)
                let frame = try await refused.next()
                if case .error(let error) = frame, error.code == .quotaExceeded,
                    error.message == "uid 1002 already has the maximum of 3 connections (quota connections-per-uid)"
                {
                } else {
                    problems.append("the 4th connection of uid 1002: \(frame.summary)")
                }
                for connection in open + [refused] { await connection.close() }
                #expect(problems.isEmpty, "\(problems)")

                // SIGHUP re-reads the file: now everyone may post under org.freedesktop.network.
                try """
                    reserve org.freedesktop.network.> owner=root group=root post=all observe=all
                    """.write(toFile: config, atomically: true, encoding: .utf8)
                daemon.send(SIGHUP)
                try await daemon.waitForLine(containing: "configuration reloaded", on: .stderr)
                let allowed = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["post", "org.freedesktop.network.up"] + socket)
                #expect(allowed.termination == .exited(0), "the reloaded rule applies\n\(allowed.diagnostics)")
                // A file that no longer parses leaves the previous configuration in force.
                try "reserve org.freedesktop.network.> post=never\n".write(toFile: config, atomically: true, encoding: .utf8)
                daemon.send(SIGHUP)
                try await daemon.waitForLine(containing: "configuration not reloaded", on: .stderr)
                let stillAllowed = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["post", "org.freedesktop.network.up"] + socket)
                #expect(stillAllowed.termination == .exited(0), "\(stillAllowed.diagnostics)")
            }
        }

        @Test("--config: a file that does not parse stops notifyd at start with an error naming FILE:LINE")
        func configurationErrors() async throws {
            try await withIntegrationScope { scope in
                let bad = scope.directory + "/bad.conf"
                try "reserve org.example\nreserve org.example post=sometimes\n".write(toFile: bad, atomically: true, encoding: .utf8)
                let failed = try await scope.run(.notifyd, ["--socket", scope.socketPath, "--config", bad])
                #expect(failed.termination == .exited(1), "\(failed.diagnostics)")
                #expect(failed.stderrText.contains("\(bad):2: 'sometimes' is not a permission"), "\(failed.diagnostics)")
                #expect(!UnixSocket.fileExists(at: scope.socketPath), "it never listened")
                let missing = try await scope.run(.notifyd, ["--socket", scope.socketPath, "--config", scope.directory + "/missing.conf"])
                #expect(missing.termination == .exited(1), "\(missing.diagnostics)")
                #expect(missing.stderrText.contains("missing.conf"), "\(missing.diagnostics)")
            }
        }

        @Test("SIGHUP with no configuration file keeps the daemon and its clients; it looks for the default file again")
        func reloadWithoutConfigurationFile() async throws {
            try await withIntegrationScope { scope in
                // A daemon of one user looks in $XDG_CONFIG_HOME/notifyd/; none exists at start.
                let configHome = scope.directory + "/config"
                let daemon = try await scope.startOpenDaemon(
                    ["--socket-mode", "666"], environment: ["XDG_CONFIG_HOME": configHome])
                defer { daemon.send(SIGKILL) }
                let socket = ["--socket", scope.socketPath]
                let listen = try scope.launch(.notifyctl, ["listen", "org.example.reload", "--count", "1"] + socket)
                try await listen.waitForLine(containing: "listening for", on: .stderr)

                daemon.send(SIGHUP)
                try await daemon.waitForLine(containing: "no configuration file, the defaults apply", on: .stderr)
                #expect(daemon.isRunning, "SIGHUP must not end the daemon\n\(daemon.diagnostics)")
                let post = try await scope.run(.notifyctl, ["post", "org.example.reload", "after-hup"] + socket)
                #expect(post.termination == .exited(0), "\(post.diagnostics)")
                #expect(try await listen.waitForExit() == .exited(0), "the client kept its subscription\n\(listen.diagnostics)")

                // A file created after start is read on the next SIGHUP...
                try FileManager.default.createDirectory(atPath: configHome + "/notifyd", withIntermediateDirectories: true)
                try "reserve org.example.reserved.> owner=root group=root post=owner observe=all\n"
                    .write(toFile: configHome + "/notifyd/notifyd.conf", atomically: true, encoding: .utf8)
                daemon.send(SIGHUP)
                try await daemon.waitForLine(containing: "rules=1", on: .stderr)
                let denied = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["post", "org.example.reserved.x"] + socket)
                #expect(denied.termination == .exited(1), "the new file's rule applies\n\(denied.diagnostics)")
                // ...and removing it brings the defaults back.
                try FileManager.default.removeItem(atPath: configHome + "/notifyd/notifyd.conf")
                daemon.send(SIGHUP)
                try await daemon.waitForLine(containing: "no configuration file, the defaults apply", on: .stderr, occurrence: 2)
                let allowed = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["post", "org.example.reserved.x"] + socket)
                #expect(allowed.termination == .exited(0), "\(allowed.diagnostics)")
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("SIGTERM during a reload that hangs (the file on a mount that does not answer) stops the daemon at once")
        func stopDuringAHungReload() async throws {
            try await withIntegrationScope { scope in
                let config = scope.directory + "/notifyd.conf"
                try "# nothing reserved\n".write(toFile: config, atomically: true, encoding: .utf8)
                let daemon = try await scope.startOpenDaemon(["--config", config])
                defer { daemon.send(SIGKILL) }
                // The file becomes a FIFO: reading it waits for a writer, as a read from a hung NFS mount or a hung
                // NSS lookup of an owner= name would.
                #expect(unlink(config) == 0 && mkfifo(config, 0o644) == 0, "errno \(errno)")
                daemon.send(SIGHUP)
                // A non-blocking open for writing succeeds once the reload has the FIFO open for reading; holding it
                // open, writing nothing, keeps the reload's read waiting.
                let writer = try await poll("the reload to open the configuration file", timeout: .seconds(20)) { () -> Int32? in
                    let descriptor = open(config, O_WRONLY | O_NONBLOCK)
                    return descriptor >= 0 ? descriptor : nil
                }
                defer { close(writer) }
                daemon.send(SIGTERM)
                #expect(try await daemon.waitForExit(timeout: 20) == .exited(0), "\(daemon.diagnostics)")
            }
        }

        @Test("notifyctl reload returns once the file is applied, and fails with the reason when it does not parse")
        func synchronousReload() async throws {
            try await withIntegrationScope { scope in
                let config = scope.directory + "/notifyd.conf"
                try "reserve org.example.first.> owner=root group=root post=owner observe=all\n"
                    .write(toFile: config, atomically: true, encoding: .utf8)
                let daemon = try await scope.startOpenDaemon(["--socket-mode", "666", "--config", config])
                defer { daemon.send(SIGKILL) }
                let socket = ["--socket", scope.socketPath]
                let postAsNobody = { (name: String) in
                    try await scope.runAs(uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["post", name] + socket)
                }
                #expect(try await postAsNobody("org.example.second.x").termination == .exited(0))

                // Once reload has returned, the new rule is in force: no waiting for the log.
                try "reserve org.example.second.> owner=root group=root post=owner observe=all\n"
                    .write(toFile: config, atomically: true, encoding: .utf8)
                let reload = try await scope.run(.notifyctl, ["reload"] + socket)
                #expect(reload.termination == .exited(0), "\(reload.diagnostics)")
                let refused = try await postAsNobody("org.example.second.x")
                #expect(refused.termination == .exited(1), "the reloaded rule applies at once\n\(refused.diagnostics)")
                #expect(try await postAsNobody("org.example.first.x").termination == .exited(0))

                // A file that does not parse: reload fails with the daemon's reason; the rules in force stay.
                try "reserve org.example.second.> post=sometimes\n".write(toFile: config, atomically: true, encoding: .utf8)
                let failed = try await scope.run(.notifyctl, ["reload"] + socket)
                #expect(failed.termination == .exited(1), "\(failed.diagnostics)")
                #expect(
                    failed.stderrText.contains("configuration not reloaded, the previous rules stay: \(config):1:"),
                    "\(failed.diagnostics)")
                #expect(daemon.isRunning)
                #expect(try await postAsNobody("org.example.second.x").termination == .exited(1))

                // Signalling the daemon takes root or its own user.
                let byNobody = try await scope.runAs(
                    uid: Self.nobody.uid, gid: Self.nobody.gid, .notifyctl, ["reload"] + socket)
                #expect(byNobody.termination == .exited(1), "\(byNobody.diagnostics)")
                #expect(byNobody.stderrText.contains("cannot signal notifyd"), "\(byNobody.diagnostics)")
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("A client refuses a daemon run by another user (the /tmp/notifyd-UID hijack), unless told to trust it")
        func clientRefusesAnotherUsersDaemon() async throws {
            try await withIntegrationScope { scope in
                // uid 1001 prepared the place uid 1002's programs look for, and runs a daemon there.
                guard chmod(scope.directory, 0o755) == 0 else { throw TestFailure("chmod failed") }
                let directory = scope.directory + "/notifyd-1002"
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
                guard chown(directory, 1_001, 1_001) == 0 else { throw TestFailure("chown failed") }
                let socket = directory + "/notifyd.sock"
                let intruder = try scope.launchAs(
                    uid: 1_001, gid: 1_001, .notifyd, ["--socket", socket, "--socket-mode", "666", "--log", "stderr"])
                defer { intruder.send(SIGKILL) }
                try await intruder.waitForLine(containing: "notifyd listening", on: .stderr)

                let victim = try await scope.runAs(
                    uid: 1_002, gid: 1_002, .notifyctl, ["post", "user.1002.secret", "password", "--socket", socket])
                #expect(victim.termination == .exited(1), "\(victim.diagnostics)")
                #expect(
                    victim.stderrText.contains("refusing the daemon at \(socket): it runs as uid 1001, not as you (uid 1002)"),
                    "\(victim.diagnostics)")
                #expect(!intruder.stderrText.contains("uid=1002"), "the victim never got as far as a connection log")
                let root = try await scope.run(.notifyctl, ["status", "--socket", socket])
                #expect(root.termination == .exited(1), "root does not trust another user's daemon either\n\(root.diagnostics)")

                // Told explicitly, the client trusts that user; the daemon's own user always may.
                let trusting = try await scope.runAs(
                    uid: 1_002, gid: 1_002, .notifyctl, ["status", "--socket", socket],
                    environment: ["NOTIFYD_DAEMON_UID": "1001"])
                #expect(trusting.termination == .exited(0), "\(trusting.diagnostics)")
                let owner = try await scope.runAs(uid: 1_001, gid: 1_001, .notifyctl, ["status", "--socket", socket])
                #expect(owner.termination == .exited(0), "\(owner.diagnostics)")
            }
        }

        @Test("--config: notifyd still stops cleanly on SIGTERM")
        func configurationShutdown() async throws {
            try await withIntegrationScope { scope in
                let config = scope.directory + "/notifyd.conf"
                try "reserve org.example post=owner\n".write(toFile: config, atomically: true, encoding: .utf8)
                let daemon = try await scope.startOpenDaemon(["--config", config])
                daemon.send(SIGTERM)
                let end = try await daemon.waitForExit(timeout: 15)
                #expect(end == .exited(0), "\(daemon.diagnostics)")
            }
        }
    }
}
