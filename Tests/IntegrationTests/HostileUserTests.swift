#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NIOCore
import NotifyTestSupport
import NotifyTypes
import NotifyWire
import Testing

extension Integration {
    /// Another local user attacks the real daemon: bob (uid 4202) connects with his own credentials (the daemon reads
    /// them with `SO_PEERCRED`), alice (uid 4201) and root go on using it. What each attack may cost bob is refused
    /// with an error that names the limit; alice loses nothing, and root's `notifyctl` shows everything, escaped.
    /// (How long alice waits meanwhile is measured in `make bench`, scenario 10, not here.)
    @Suite("Hostile users")
    struct HostileUserTests {
        private static let attacker = PeerIdentity.bob
        private static let victim = PeerIdentity.alice

        /// A daemon clients of every uid can reach, with `configuration` as its file.
        private static func startDaemon(_ scope: IntegrationScope, configuration: String = "") async throws -> ChildProcess {
            let file = scope.directory + "/notifyd.conf"
            try configuration.write(toFile: file, atomically: true, encoding: .utf8)
            return try await scope.startOpenDaemon(["--socket-mode", "666", "--config", file])
        }

        @Test("bob at every quota at once, with a stopped subscriber and a flood: alice's notifications all arrive in order, each of bob's extra requests is refused naming its quota, and his tables go when he does")
        func everyQuotaTaken() async throws {
            try await withIntegrationScope { scope in
                let outboundQuota = 1 << 20
                let daemon = try await Self.startDaemon(
                    scope, configuration: Self.smallQuotas + "quota outbound-bytes-per-uid \(outboundQuota)\n")
                let path = scope.socketPath
                let root = try await TestClient.connect(to: path, name: "root-watcher")
                try await root.hello()
                let baseline = try await root.query(DaemonStatus.self, .status)

                // bob's connections, up to his quota: the next one is refused with a reason.
                var bob: [TestClient] = []
                for index in 0..<6 {
                    let connection = try await TestClient.connect(to: path, name: "bob-\(index)", as: Self.attacker)
                    try await connection.hello()
                    bob.append(connection)
                }
                // (Refused when it connects: the ERROR comes first, unasked.)
                let extra = try await TestClient.connect(to: path, name: "bob-extra", as: Self.attacker)
                try Self.expectQuota(try await extra.nextError(), "connections-per-uid", "the seventh connection")
                _ = try await extra.expectEnd()

                // A subscriber that never reads, then patterns, exact names, state names and retained bytes to the brim.
                let stalled = bob[0], flooder = bob[1], hog = bob[2]
                try await stalled.subscribe("bob.flood", id: 1, policy: .queue(limit: 100_000))
                try await stalled.setReading(false)
                var patterns = 0
                while true {
                    // 16 labels each, 4 of them wildcards (they match 16-label names, not bob.flood: this fills the
                    // label quota; what matching costs is FairnessTests' and PatternTrieCostTests').
                    let pattern = "bob.p\(patterns).*.c.*.e.f.g.*.i.j.k.*.m.n.o"
                    let id = UInt32(100 + patterns)
                    let reply = try await hog.request {
                        .testSubscribe(requestID: $0, subscriptionID: id, name: pattern, policy: .coalesce)
                    }.reply
                    if case .error(let error) = reply {
                        try Self.expectQuota(error, "pattern-labels-per-uid", "pattern \(patterns + 1)")
                        break
                    }
                    patterns += 1
                    if patterns > 256 { throw TestFailure("the pattern-labels-per-uid quota of 256 never refused a pattern") }
                }
                #expect(patterns == 16, "256 labels hold 16 patterns of 16 labels, not \(patterns)")
                var exact = 0
                while true {
                    let id = UInt32(1_000 + exact)
                    let reply = try await hog.request {
                        .testSubscribe(requestID: $0, subscriptionID: id, name: "bob.exact.\(id)", policy: .coalesce)
                    }.reply
                    if case .error(let error) = reply {
                        try Self.expectQuota(error, "subscriptions-per-uid", "subscription \(exact + patterns + 2)")
                        break
                    }
                    exact += 1
                    if exact > 100 { throw TestFailure("the subscriptions-per-uid quota of 100 never refused a subscription") }
                }
                #expect(1 + patterns + exact == 100, "bob holds \(1 + patterns + exact) subscriptions")
                for index in 0..<40 { try await hog.setState("bob.state.\(index)", UInt64(index)) }
                try Self.expectQuota(try await hog.setStateRefused("bob.state.40", 40), "state-names-per-uid", "state name 41")
                let retainedPayload = String(repeating: "r", count: 60_000)
                for index in 0..<3 { _ = try await hog.post("bob.retained.\(index)", retainedPayload, retain: true) }
                try Self.expectQuota(
                    try await hog.postRefused("bob.retained.3", retainedPayload, retain: true), "retained-bytes-per-uid",
                    "a fourth retained payload of 60,000 bytes")

                // alice, meanwhile, posts with acknowledgements to her own subscriber, while bob floods his stopped one.
                let alice = try await Alice(path: path)
                var flood = ByteBuffer()
                let floodPayload = ByteBuffer(repeating: 0x66, count: 1_000)
                for _ in 0..<20_000 {
                    ClientFrame.post(ClientFrame.Post(requestID: 0, name: "bob.flood", payload: floodPayload)).encode(into: &flood)
                }
                let flooding = flooder.startSending(flood)
                try await alice.expectPostsArriveInOrder()
                try await flooding.get()
                _ = try await flooder.barrier()

                // What the daemon holds for bob stays within his outbound quota (plus the frame that crossed it).
                let clients = try await root.query([DaemonClient].self, .clients)
                let bobsBytes = clients.filter { $0.uid == Self.attacker.uid }.reduce(0) { $0 + $1.pendingBytes + $1.heldBytes }
                #expect(bobsBytes <= outboundQuota + 2_048, "\(bobsBytes) bytes queued or held for bob (quota \(outboundQuota))")
                #expect(clients.filter { $0.uid == Self.victim.uid }.allSatisfy { $0.pendingBytes + $0.heldBytes == 0 })

                // root's notifyctl still lists everything.
                for command in [["clients"], ["names"], ["status"]] {
                    let run = try await scope.run(.notifyctl, command + ["--socket", path])
                    #expect(run.termination == .exited(0), "\(run.diagnostics)")
                    if command == ["names"] {
                        #expect(run.stdoutLines.contains { $0.hasSuffix(" alice.news") }, "\(run.diagnostics)")
                    }
                }

                // bob leaves: his connections, subscriptions and patterns go with him (state values and retained
                // notifications stay, as for anyone's).
                for connection in bob { await connection.close() }
                let after = try await Self.expectOnlyAliceLeft(root: root, baseline: baseline)
                #expect(after.outboundBytes == 0 && after.heldBytes == 0)

                // A new user is not charged for any of it.
                let carol = try await TestClient.connect(to: path, name: "carol", as: .carol)
                try await carol.hello()
                try await carol.subscribe("carol.p.*.c.*.e.f.g.*.i.j.k.*.m.n.o", id: 1)
                try await carol.setState("carol.state", 1)
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("a real process of another user (Benchmarks/quota_attacker.py as uid 65534, through setpriv) takes every quota; alice's notifications all arrive in order; killed, its connections and subscriptions go")
        func quotaAttackerProcess() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await Self.startDaemon(scope, configuration: Self.smallQuotas)
                let path = scope.socketPath
                let root = try await TestClient.connect(to: path, name: "root-watcher")
                try await root.hello()
                let baseline = try await root.query(DaemonStatus.self, .status)

                try Self.copyBenchmarkScripts(["quota_attacker.py", "wire.py"], into: scope)
                let attacker = try ChildProcess(
                    executable: CredentialSwitch.setprivURL,
                    arguments: CredentialSwitch.setprivArguments(
                        PeerIdentity(uid: 65_534, gid: 65_534),
                        running: ["/usr/bin/python3", scope.directory + "/quota_attacker.py", path]))
                let line = try await attacker.waitForLine(containing: "{", on: .stdout, timeout: 60)
                let taken = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Int] ?? [:]
                // Every quota to the brim: 100 subscriptions in all (the script's first "pattern" has no wildcard: an
                // exact name, which costs no labels; 16 patterns of 16 labels fill the 256), 40 state names, three
                // retained payloads of 60,000 bytes.
                #expect(
                    taken == ["connections": 6, "pattern_subscriptions": 17, "exact_subscriptions": 83, "state_names": 40,
                              "retained_posts": 3], "what the attacker got: \(line)\n\(attacker.diagnostics)")

                try await Alice(path: path).expectPostsArriveInOrder()
                let names = try await scope.run(.notifyctl, ["names", "--socket", path])
                #expect(names.termination == .exited(0) && names.stdoutLines.contains { $0.hasSuffix(" alice.news") }, "\(names.diagnostics)")

                attacker.send(SIGKILL)
                _ = try await attacker.waitForExit()
                _ = try await Self.expectOnlyAliceLeft(root: root, baseline: baseline)
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("another user's client name is printed escaped by root's notifyctl clients: no escape sequence and no forged row reach the terminal")
        func hostileClientNameEscaped() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await Self.startDaemon(scope)
                // A title change, a screen clear, a forged row for root's sshd, a C1 CSI and a right-to-left override.
                let hostile = "evil\u{1b}]0;pwned\u{07}\u{1b}[2J\n  4242      0     0        0        0  no         sshd (root)\u{9b}31m\u{202e}x"
                let connection = try await TestClient.connect(to: scope.socketPath, name: hostile, as: Self.attacker)
                try await connection.hello()

                let clients = try await scope.run(.notifyctl, ["clients", "--socket", scope.socketPath])
                #expect(clients.termination == .exited(0), "\(clients.diagnostics)")
                let output = clients.stdoutLines.joined(separator: "\n")
                for forbidden: Unicode.Scalar in ["\u{1b}", "\u{07}", "\u{9b}", "\u{202e}"] {
                    #expect(!output.unicodeScalars.contains(forbidden), "U+\(String(forbidden.value, radix: 16)) reached stdout: \(output)")
                }
                #expect(!clients.stdoutLines.contains { $0.contains("4242") && !$0.contains("evil") }, "a forged row: \(output)")
                #expect(
                    clients.stdoutLines.contains {
                        $0.contains(#"(evil\u{1b}]0;pwned\u{7}\u{1b}[2J\n  4242"#) && $0.hasSuffix(#"(root)\u{9b}31m\u{202e}x)"#)
                    }, "\(output)")

                // JSON too: the encoder escapes C0 controls itself; C1 controls and bidi overrides are escaped as
                // \uXXXX, and the document still decodes to the client's name as it is.
                let json = try await scope.run(.notifyctl, ["clients", "--json", "--socket", scope.socketPath])
                #expect(json.termination == .exited(0), "\(json.diagnostics)")
                let jsonText = json.stdoutLines.joined(separator: "\n")
                for forbidden: Unicode.Scalar in ["\u{1b}", "\u{07}", "\u{9b}", "\u{202e}"] {
                    #expect(!jsonText.unicodeScalars.contains(forbidden), "U+\(String(forbidden.value, radix: 16)) reached stdout: \(jsonText)")
                }
                let decoded = try JSONSerialization.jsonObject(with: Data(jsonText.utf8)) as? [[String: Any]]
                #expect(decoded?.contains { $0["client_name"] as? String == hostile } == true, "\(jsonText)")
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("another user's 600 long state names cannot make names fail for anyone: alice's notifyctl names lists every name, though the answer is longer than a frame")
        func namesLongerThanAFrame() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await Self.startDaemon(scope)
                let setter = try await TestClient.connect(to: scope.socketPath, name: "setter", as: Self.attacker)
                try await setter.hello()
                let names = (0..<600).map { "org.example." + String(repeating: "n", count: 230) + String(1_000 + $0) }
                try await setter.send(names.enumerated().map { .setState(requestID: UInt32($0.offset + 1), name: $0.element, value: 1) })
                for _ in names { guard case .ok = try await setter.next() else { throw TestFailure("SET_STATE refused") } }

                let socket = ["--socket", scope.socketPath]
                let (uid, gid) = (Self.victim.uid, Self.victim.gid)
                let listing = try await scope.runAs(uid: uid, gid: gid, .notifyctl, ["names"] + socket)
                #expect(listing.termination == .exited(0), "\(listing.diagnostics)")
                #expect(listing.stdoutLines.count == 1 + names.count, "\(listing.stdoutLines.count) lines")
                #expect(Set(listing.stdoutLines.dropFirst().compactMap { $0.split(separator: " ").last.map(String.init) }) == Set(names))
                let json = try await scope.runAs(uid: uid, gid: gid, .notifyctl, ["names", "--json"] + socket)
                #expect(json.termination == .exited(0), "\(json.diagnostics)")
                let decoded = try JSONSerialization.jsonObject(with: Data(json.stdoutLines.joined().utf8)) as? [[String: Any]]
                #expect(decoded?.count == names.count)
                try await scope.stopDaemon(daemon)
            }
        }

        @Test("clients lists every connection when the answer is longer than a frame: 400 connections of another user with 255-byte names")
        func clientsLongerThanAFrame() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await Self.startDaemon(scope, configuration: "quota connections-per-uid 500\n")
                // Held by another process (see holdConnections).
                let prefix = String(repeating: "c", count: 250)
                let names = (0..<400).map { prefix + String(10_000 + $0) }
                let holder = try await scope.holdConnections(names.count, namePrefix: prefix, as: Self.attacker)

                let listing = try await scope.run(.notifyctl, ["clients", "--json", "--socket", scope.socketPath])
                #expect(listing.termination == .exited(0), "\(listing.diagnostics)")
                let decoded = try JSONSerialization.jsonObject(with: Data(listing.stdoutLines.joined().utf8)) as? [[String: Any]]
                let listed = Set((decoded ?? []).compactMap { $0["client_name"] as? String })
                #expect(listed.isSuperset(of: names), "\(names.filter { !listed.contains($0) }.count) of bob's 400 connections missing")
                let text = try await scope.run(.notifyctl, ["clients", "--socket", scope.socketPath])
                #expect(text.termination == .exited(0), "\(text.diagnostics)")
                #expect(text.stdoutLines.filter { $0.contains(String(repeating: "c", count: 250)) }.count == names.count)
                holder.send(SIGKILL)
                _ = try await holder.waitForExit()
                try await scope.stopDaemon(daemon)
            }
        }

        /// Copies scripts of `Benchmarks/` into the scope's directory, where another uid can read them.
        private static func copyBenchmarkScripts(_ files: [String], into scope: IntegrationScope) throws {
            let benchmarks = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Benchmarks")
            for file in files {
                let copy = scope.directory + "/" + file
                try FileManager.default.copyItem(atPath: benchmarks.appendingPathComponent(file).path, toPath: copy)
                guard chmod(copy, 0o644) == 0 else { throw TestFailure("chmod \(copy) failed") }
            }
        }

        /// Quotas small enough for a test to reach them all (the outbound bytes' too is added where it matters).
        private static let smallQuotas = """
            quota connections-per-uid 6
            quota subscriptions-per-uid 100
            quota pattern-labels-per-uid 256
            quota state-names-per-uid 40
            quota retained-bytes-per-uid 200000

            """

        /// The victim: a subscriber to `alice.news` and a poster that posts to it with acknowledgements.
        private struct Alice {
            let subscriber: TestClient
            let poster: TestClient

            init(path: String) async throws {
                subscriber = try await TestClient.connect(to: path, name: "alice-subscriber", as: HostileUserTests.victim)
                try await subscriber.hello()
                try await subscriber.subscribe("alice.news", id: 1, policy: .queue(limit: 100_000))
                poster = try await TestClient.connect(to: path, name: "alice-poster", as: HostileUserTests.victim)
                try await poster.hello()
            }

            /// Posts 300 notifications and expects every one at the subscriber, in order.
            func expectPostsArriveInOrder(sourceLocation: SourceLocation = #_sourceLocation) async throws {
                let posts = 300
                for index in 1...posts { _ = try await poster.post("alice.news", "\(index)") }
                var received: [String] = []
                while received.count < posts {
                    received.append(String(buffer: try await subscriber.nextNotification(timeout: .seconds(60)).payload))
                }
                #expect(
                    received == (1...posts).map { "\($0)" }, "alice's subscriber got \(received.count) of \(posts), or out of order",
                    sourceLocation: sourceLocation)
            }
        }

        /// Waits until the only connections left besides `baseline`'s are alice's two, and checks that the
        /// attacker's subscriptions and patterns went with its connections.
        private static func expectOnlyAliceLeft(
            root: TestClient, baseline: DaemonStatus, sourceLocation: SourceLocation = #_sourceLocation
        ) async throws -> DaemonStatus {
            let after = try await poll("the attacker's connections and subscriptions to be gone", timeout: 30) {
                () throws -> DaemonStatus? in
                let status = try await root.query(DaemonStatus.self, .status)
                return status.connections == baseline.connections + 2 ? status : nil
            }
            #expect(after.subscriptions == baseline.subscriptions + 1, "\(after.subscriptions) subscriptions left", sourceLocation: sourceLocation)
            #expect(after.patterns == baseline.patterns, "\(after.patterns) patterns left", sourceLocation: sourceLocation)
            return after
        }

        /// Checks that `error` is `quota-exceeded` naming `quota`, for `what`.
        private static func expectQuota(
            _ error: ErrorFrame, _ quota: String, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
        ) throws {
            #expect(error.code == .quotaExceeded, "\(what): \(error.code.map { "\($0)" } ?? "code \(error.rawCode)")", sourceLocation: sourceLocation)
            #expect(error.message.contains(quota), "\(what): the message does not name \(quota): \(error.message)", sourceLocation: sourceLocation)
        }
    }
}
