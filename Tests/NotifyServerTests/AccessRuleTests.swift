#if canImport(Glibc)
import Glibc
#endif
import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Access control (PROTOCOL.md § 8.2): the built-in `user.<uid>.` rule and the reserved prefixes of the
/// configuration file, each checked to allow and to deny, with clients connected as different uids.
@Suite("Access rules", .timeLimit(.minutes(TestScale.minutes(1))))
struct AccessRuleTests {
    /// Line numbers matter: denials name `rule at test.conf:LINE`.
    static let configuration = """
        # access tests
        reserve org.freedesktop.network.> owner=root group=root post=owner observe=all
        reserve com.example.secret owner=4201 group=4300 post=owner observe=group
        reserve com.example.secret.public. owner=4201 group=4300 post=group observe=all
        reserve com.example.closed   owner=4201   post=none observe=none   # nobody but root
        reserve com.example.open owner=4201 post=all
        """

    static func start(_ body: (TestServer) async throws -> Void) async throws {
        let access = try parseAccess(configuration)
        try await withServer(everyUser: true, { $0.access = access }, body)
    }

    // MARK: Built-in rule

    @Test("user.<uid>. names are private by default: the owner and root may post and observe, another uid is refused both, naming the built-in rule")
    func userNames() async throws {
        try await withServer(everyUser: true) { server in
            let alice = try await server.connect("alice", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            let root = try await server.connect("root")
            let refused = try await bob.subscribeRefused("user.4201.>", id: 1)
            #expect(refused.code == .permissionDenied && !refused.closesConnection)
            #expect(
                refused.message
                    == "permission denied: only uid 4201 and root may observe names under 'user.4201' (built-in rule); you are uid 4202")
            #expect(try await bob.subscribeRefused("user.4201.inbox", id: 2).code == .permissionDenied)
            #expect(try await bob.subscribeRefused("user.4201.*", id: 2).code == .permissionDenied)
            try await alice.subscribe("user.4201.>", id: 1)
            try await root.subscribe("user.4201.inbox", id: 1)

            let own = try await alice.post("user.4201.inbox", "from alice")
            #expect(own.delivered == 2, "alice and root observe alice's names")
            #expect(own.before.count == 1, "alice's own copy arrives before POSTED")
            #expect(try await root.nextNotification().sender.uid == 4201)
            let byRoot = try await root.post("user.4201.inbox", "from root")
            #expect(try await alice.nextNotification().sequence == byRoot.sequence)

            let denied = try await bob.postRefused("user.4201.inbox", "from bob")
            #expect(denied.code == .permissionDenied)
            #expect(!denied.closesConnection)
            #expect(
                denied.message
                    == "permission denied: only uid 4201 and root may post names under 'user.4201.' (built-in rule); you are uid 4202")
            try await bob.expectQuiet("the refused post reached nobody, not even bob's own subscription")
            let deniedRetain = try await bob.postRefused("user.4201.status", "x", retain: true)
            #expect(deniedRetain.code == .permissionDenied)
            let retained = try await root.subscribe("user.4201.status", id: 2, retained: true)
            #expect(retained.isEmpty, "a refused post is not retained")

            #expect(try await bob.postRefused("user.4201.a.b.c").code == .permissionDenied, "every name below user.4201.")
            // A label that starts with a combining mark is still a label (names split on the byte '.').
            #expect(try await bob.postRefused("user.4201.\u{301}x").code == .permissionDenied)
            #expect(try await bob.subscribeRefused("user.4201.\u{301}x", id: 9).code == .permissionDenied)
            // Only user.<canonical decimal uid>.<more> belongs to a uid; everything else is an ordinary name.
            for name in [
                "user.4201", "user", "user.alice.inbox", "user.uid.4201.inbox", "user.99999999999.x", "users.4201.x",
                "user.04201.inbox", "user.+4201.inbox",
            ] {
                try await bob.post(name)
            }
            try await alice.expectQuiet("none of those is alice's")

            // A pattern that also matches others' names is allowed, and filtered name by name.
            try await bob.subscribe("user.>", id: 3)
            #expect(try await alice.post("user.4201.inbox", "private").delivered == 2)
            try await bob.expectQuiet("bob's user.> does not reach alice's names")
            let bobs = try await bob.post("user.4202.inbox", "bob's own")
            #expect(bobs.delivered == 1 && bobs.before.count == 1, "bob's user.> gets his own names")
            #expect(try await bob.post("user.alice.inbox").delivered == 1, "and ordinary names under user.")
        }
    }

    @Test("user-names observe=all: every user may observe (not post to) another's user.<uid>. names")
    func userNamesPublic() async throws {
        try await withServer(everyUser: true, { $0.access.userNamesObserve = .all }) { server in
            let alice = try await server.connect("alice", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            try await bob.subscribe("user.4201.>", id: 1)
            #expect(try await alice.post("user.4201.inbox", "from alice").delivered == 1)
            #expect(try await bob.nextNotification().sender.uid == 4201)
            try await alice.setState("user.4201.mood", 2)
            #expect(try await bob.state(of: "user.4201.mood") == 2)
            #expect(try await bob.postRefused("user.4201.inbox").code == .permissionDenied)
        }
    }

    @Test("a file with CRLF line ends parses like the same file with LF ends (a leading comment hid every rule)")
    func crlfLineEnds() throws {
        let lf = "# rules\nreserve org.example.> post=owner observe=all\nquota connections-per-uid 3\nuser-names observe=all\n"
        let crlf = lf.replacingOccurrences(of: "\n", with: "\r\n")
        let parsed = try AccessConfiguration.parse(crlf, source: "crlf.conf")
        #expect(parsed.rules.map(\.prefix) == ["org.example"])
        #expect(parsed.quotas.connectionsPerUID == 3)
        #expect(parsed.userNamesObserve == .all)
        #expect(parsed.rules.first?.source == "crlf.conf:2")
        #expect(try AccessConfiguration.parse(lf, source: "crlf.conf") == parsed)
    }

    @Test("user-names: observe=owner and observe=all parse; anything else names the line")
    func userNamesConfiguration() throws {
        #expect(try AccessConfiguration.parse("user-names observe=all", source: "u.conf").userNamesObserve == .all)
        #expect(try AccessConfiguration.parse("user-names observe=owner", source: "u.conf").userNamesObserve == .owner)
        #expect(try AccessConfiguration.parse("", source: "u.conf").userNamesObserve == .owner, "private by default")
        for text in ["user-names observe=group", "user-names", "user-names post=all", "user-names observe=all extra"] {
            #expect(throws: ConfigurationError.self, "\(text)") { try AccessConfiguration.parse(text, source: "u.conf") }
            do {
                _ = try AccessConfiguration.parse(text, source: "u.conf")
            } catch {
                #expect(error.description == "u.conf:1: user-names takes observe=owner (the default) or observe=all")
            }
        }
    }

    // MARK: Reserved prefixes

    @Test("post=owner with owner=root: only root may post and set state under org.freedesktop.network; everyone observes")
    func rootOnlyPrefix() async throws {
        try await Self.start { server in
            let alice = try await server.connect("alice", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            let root = try await server.connect("root")
            try await bob.subscribe("org.freedesktop.network.>", id: 1)

            for name in ["org.freedesktop.network", "org.freedesktop.network.up", "org.freedesktop.network.wifi.signal"] {
                let denied = try await alice.postRefused(name)
                #expect(denied.code == .permissionDenied)
                // Who may is worded "only root" or "only uid 0 and root" (PROTOCOL.md § 8.2 shows the latter).
                #expect(denied.message.hasPrefix("permission denied: only "), "\(denied.message)")
                #expect(
                    denied.message.hasSuffix(
                        "root may post names under 'org.freedesktop.network' (rule at test.conf:2); you are uid 4201"),
                    "\(denied.message)")
            }
            let stateDenied = try await alice.setStateRefused("org.freedesktop.network.up", 1)
            #expect(stateDenied.code == .permissionDenied)
            #expect(
                stateDenied.message.hasSuffix(
                    "root may set the state of names under 'org.freedesktop.network' (rule at test.conf:2); you are uid 4201"),
                "\(stateDenied.message)")
            try await bob.expectQuiet("refused posts reach nobody")

            let posted = try await root.post("org.freedesktop.network.up", "eth0")
            #expect(posted.delivered == 1)
            let received = try await bob.nextNotification()
            #expect(received.sender.uid == 0 && received.payloadText == "eth0")
            try await root.setState("org.freedesktop.network.up", 1)
            #expect(try await alice.state(of: "org.freedesktop.network.up") == 1, "observe=all: anyone reads the state")
            // A rule covers whole labels: org.freedesktop.networks is not under it.
            try await alice.post("org.freedesktop.networks.x")
            try await alice.post("org.freedesktop.x")
        }
    }

    @Test("post=owner, observe=group: the owner posts; others are refused; group members and the owner observe; others are refused or filtered")
    func ownerAndGroup() async throws {
        try await Self.start { server in
            let alice = try await server.connect("alice (owner)", as: .alice)
            let bob = try await server.connect("bob (outsider)", as: .bob)
            let carol = try await server.connect("carol (group 4300)", as: .carol)
            let root = try await server.connect("root")

            // Observing: the owner and group members may subscribe, an outsider is refused naming the rule.
            try await alice.subscribe("com.example.secret.key", id: 1)
            try await carol.subscribe("com.example.secret.key", id: 1)
            let refused = try await bob.subscribeRefused("com.example.secret.key", id: 1)
            #expect(refused.code == .permissionDenied)
            #expect(
                refused.message
                    == "permission denied: only uid 4201, members of gid 4300 and root may observe names under 'com.example.secret' (rule at test.conf:3); you are uid 4202")
            #expect(try await bob.subscribeRefused("com.example.secret.key.>", id: 1).code == .permissionDenied)
            #expect(try await server.status().subscriptions == 2, "refused subscriptions were not added")

            // Posting: only the owner (and root).
            let byOwner = try await alice.post("com.example.secret.key", "k1")
            #expect(byOwner.delivered == 2, "alice and carol")
            #expect(try await carol.barrier().compactMap { $0.anyNotification?.payloadText } == ["k1"])
            for client in [carol, bob] {
                let denied = try await client.postRefused("com.example.secret.key", "k2")
                #expect(denied.code == .permissionDenied)
                #expect(
                    denied.message
                        == "permission denied: only uid 4201 and root may post names under 'com.example.secret' (rule at test.conf:3); you are uid \(client.identity.uid)")
            }
            try await root.post("com.example.secret.key", "k3")
            #expect(try await carol.barrier().compactMap { $0.anyNotification?.payloadText } == ["k3"])

            // GET_STATE follows the observe permission.
            try await alice.setState("com.example.secret.key", 5)
            #expect(try await carol.state(of: "com.example.secret.key") == 5)
            let stateDenied = try await bob.expectError("GET_STATE") { .getState(requestID: $0, name: "com.example.secret.key") }
            #expect(stateDenied.code == .permissionDenied)
            #expect(
                stateDenied.message
                    == "permission denied: you may not observe names under 'com.example.secret' (rule at test.conf:3)")
        }
    }

    @Test("a deeper rule overrides a shallower one (longest prefix wins), in both directions")
    func deeperRule() async throws {
        try await Self.start { server in
            let alice = try await server.connect("alice (owner)", as: .alice)
            let bob = try await server.connect("bob (outsider)", as: .bob)
            let carol = try await server.connect("carol (group 4300)", as: .carol)

            // com.example.secret.public: observe=all although com.example.secret is observe=group.
            try await bob.subscribe("com.example.secret.public.news", id: 1)
            // post=group although com.example.secret is post=owner: carol may post here, not above.
            let posted = try await carol.post("com.example.secret.public.news", "hello")
            #expect(posted.delivered == 1)
            #expect(try await bob.nextNotification().payloadText == "hello")
            try await alice.post("com.example.secret.public.news", "owner")
            _ = try await bob.nextNotification()
            let denied = try await bob.postRefused("com.example.secret.public.news")
            #expect(
                denied.message
                    == "permission denied: only uid 4201, members of gid 4300 and root may post names under 'com.example.secret.public' (rule at test.conf:4); you are uid 4202")
            #expect(try await carol.postRefused("com.example.secret.private").code == .permissionDenied, "the shallower rule still applies beside it")
        }
    }

    @Test("a pattern reaching into a restricted prefix is accepted when a deeper rule may allow some names, and those it may not observe are filtered out")
    func patternFiltering() async throws {
        try await Self.start { server in
            let bob = try await server.connect("bob (outsider)", as: .bob)
            let carol = try await server.connect("carol (group 4300)", as: .carol)
            let root = try await server.connect("root")
            // com.example.secret has a deeper rule (…public), so these are accepted and filtered (PROTOCOL.md § 8.2).
            try await bob.subscribe("com.example.>", id: 1)
            try await bob.subscribe("com.example.secret.>", id: 2)
            try await bob.subscribe(">", id: 3)
            try await carol.subscribe("com.example.>", id: 1)

            let secret = try await root.post("com.example.secret.key", "secret")
            #expect(secret.delivered == 1, "only carol: bob's subscriptions do not count")
            let open = try await root.post("com.example.open.x", "open")
            #expect(open.delivered == 2)
            let publicNews = try await root.post("com.example.secret.public.news", "public")
            #expect(publicNews.delivered == 2)
            let closed = try await root.post("com.example.closed.x", "closed")
            #expect(closed.delivered == 0, "observe=none: nobody but root")
            #expect(try await bob.barrier().compactMap { $0.anyNotification?.payloadText } == ["open", "public"])
            #expect(try await carol.barrier().compactMap { $0.anyNotification?.payloadText } == ["secret", "open", "public"])

            // The same filter applies to retained notifications.
            for name in ["com.example.secret.key", "com.example.open.x", "com.example.closed.x"] {
                try await root.post(name, "retained \(name)", retain: true)
            }
            _ = try await bob.barrier()
            _ = try await carol.barrier()
            let bobRetained = try await bob.subscribe("com.example.>", id: 10, retained: true)
            #expect(bobRetained.compactMap { $0.anyNotification?.name } == ["com.example.open.x"])
            let carolRetained = try await carol.subscribe("com.example.>", id: 10, retained: true)
            #expect(carolRetained.compactMap { $0.anyNotification?.name } == ["com.example.secret.key", "com.example.open.x"])
        }
    }

    @Test("post=none, observe=none: not even the owner may post or observe; root may")
    func nonePermission() async throws {
        try await Self.start { server in
            let alice = try await server.connect("alice (owner)", as: .alice)
            let root = try await server.connect("root")
            let post = try await alice.postRefused("com.example.closed.x")
            #expect(
                post.message
                    == "permission denied: only root may post names under 'com.example.closed' (rule at test.conf:5); you are uid 4201")
            let observe = try await alice.subscribeRefused("com.example.closed.>", id: 1)
            #expect(
                observe.message
                    == "permission denied: only root may observe names under 'com.example.closed' (rule at test.conf:5); you are uid 4201")
            try await root.subscribe("com.example.closed.>", id: 1)
            let posted = try await root.post("com.example.closed.x", "root")
            #expect(posted.delivered == 1)
            // post=all: anyone may post, defaults observe=all.
            try await alice.post("com.example.open.x")
            let bob = try await server.connect("bob", as: .bob)
            try await bob.post("com.example.open.y")
            try await bob.subscribe("com.example.open.>", id: 1)
        }
    }

    @Test("a deeper rule only keeps a subscription open when it lies below the literal prefix label by label")
    func deeperRuleIsLabelBounded() async throws {
        let access = try parseAccess("""
            reserve com.example.secret observe=none
            reserve com.example.secretive observe=all
            """)
        try await withServer(everyUser: true, { $0.access = access }) { server in
            let bob = try await server.connect("bob", as: .bob)
            // com.example.secretive is not below com.example.secret (it only shares the characters), so nothing
            // below the literal prefix could be allowed: refused.
            let refused = try await bob.subscribeRefused("com.example.secret.>", id: 1)
            #expect(refused.code == .permissionDenied)
            #expect(refused.message.contains("(rule at test.conf:1)"), "\(refused.message)")
            try await bob.subscribe("com.example.secretive.>", id: 2)
        }
    }

    @Test("names answers hide the names (and state values) a uid may not observe, as GET_STATE does; root sees all")
    func namesQueryFollowsObserve() async throws {
        try await Self.start { server in
            let alice = try await server.connect("alice (owner)", as: .alice)
            let bob = try await server.connect("bob (outsider)", as: .bob)
            let root = try await server.connect("root")
            try await alice.setState("com.example.secret.key", 42)
            try await alice.setState("com.example.open.x", 1)
            let seenByBob = try await bob.query([DaemonName].self, .names, "com.example.>").map(\.name)
            #expect(seenByBob == ["com.example.open.x"], "bob may not read com.example.secret.key's state, so names must not show it")
            let seenByOwner = try await alice.query([DaemonName].self, .names, "com.example.>").map(\.name)
            #expect(seenByOwner == ["com.example.open.x", "com.example.secret.key"])
            let seenByRoot = try await root.query([DaemonName].self, .names).map(\.name)
            #expect(seenByRoot == ["com.example.open.x", "com.example.secret.key"])
        }
    }

    @Test("for equal prefixes the earlier line decides; a rule covers whole labels")
    func equalPrefixes() async throws {
        let access = try parseAccess("""
            reserve a.b owner=4201 post=owner
            reserve a.b.> owner=4202 post=owner
            reserve a owner=4202 post=owner
            """)
        try await withServer(everyUser: true, { $0.access = access }) { server in
            let alice = try await server.connect("alice", as: .alice)
            let bob = try await server.connect("bob", as: .bob)
            try await alice.post("a.b.c")
            let denied = try await bob.postRefused("a.b.c")
            #expect(denied.message.contains("(rule at test.conf:1)"), "\(denied.message)")
            try await bob.post("a.c")
            #expect(try await alice.postRefused("a.c").message.contains("(rule at test.conf:3)"))
            try await alice.post("ab.c")
            try await bob.post("ab.c")
        }
    }

    @Test("root is never refused, whatever the rules")
    func rootMayDoEverything() async throws {
        try await Self.start { server in
            let root = try await server.connect("root")
            for name in ["com.example.closed.x", "com.example.secret.key", "user.4201.x", "org.freedesktop.network.up"] {
                try await root.subscribe(name, id: UInt32(name.utf8.count))
                try await root.setState(name, 1)
                #expect(try await root.state(of: name) == 1)
                let posted = try await root.post(name, retain: true)
                #expect(posted.delivered == 1)
                let later = try await root.barrier()
                #expect(posted.before.count + later.count == 1, "root's own copy of \(name)")
            }
        }
    }

    @Test("new rules apply to new requests after updateAccess; existing subscriptions stay")
    func reload() async throws {
        try await withServer(everyUser: true) { server in
            let alice = try await server.connect("alice", as: .alice)
            try await alice.subscribe("org.example.>", id: 1)
            try await alice.post("org.example.x")
            _ = try await alice.barrier()
            await server.server.updateAccess(try parseAccess("reserve org.example post=owner observe=owner"))
            #expect(try await alice.postRefused("org.example.x").message.contains("(rule at test.conf:1)"))
            #expect(try await alice.subscribeRefused("org.example.y", id: 2).code == .permissionDenied)
            let root = try await server.connect("root")
            let posted = try await root.post("org.example.x")
            #expect(posted.delivered == 0, "the kept subscription no longer delivers what alice may not observe")
        }
    }

    // MARK: Configuration file

    @Test("configuration errors name the file and line", arguments: [
        ("reserve a.b\n\nfrobnicate x\n", "f.conf:3", "unknown keyword 'frobnicate'"),
        ("reserve a.b post=sometimes", "f.conf:1", "'sometimes' is not a permission"),
        ("# ok\nreserve a..b", "f.conf:2", "is not a valid name prefix"),
        ("reserve a.b owner=no-such-user-in-tests", "f.conf:1", "unknown user 'no-such-user-in-tests'"),
        ("reserve a.b group=no-such-group-in-tests", "f.conf:1", "unknown group 'no-such-group-in-tests'"),
        ("reserve a.b colour=red", "f.conf:1", "'colour=red' is not one of owner=, group=, post=, observe="),
        ("reserve", "f.conf:1", "reserve needs a name prefix"),
        ("quota connections-per-uid 0", "f.conf:1", "positive number"),
        ("quota connections-per-uid many", "f.conf:1", "positive number"),
        ("\n\nquota bananas 3", "f.conf:3", "unknown quota 'bananas'"),
        ("reserve a.b.*", "f.conf:1", "is not a valid name prefix"),
    ])
    func parseErrors(text: String, location: String, message: String) {
        do {
            let parsed = try AccessConfiguration.parse(text, source: "f.conf")
            Issue.record("expected an error at \(location), parsed \(parsed)")
        } catch {
            #expect(error.location == location)
            #expect(error.message.contains(message), "\(error.message)")
            #expect(error.description.hasPrefix("\(location): "))
        }
    }

    @Test("a prefix ending in a mark that joins the next character (U+06DD) is one word: its rule reads back as written")
    func prefixWithPrependedMark() throws {
        // U+06DD and the space after it are one Character: split by Characters, the line read "\u{6DD} owner=0" as
        // the prefix (a fuzzer found the written-back form of "reserve \u{6DD}" refused).
        let configuration = try AccessConfiguration.parse("reserve \u{6DD} owner=0 group=0 post=owner observe=all\r\n", source: "mark.conf")
        #expect(
            configuration.rules == [
                .init(prefix: "\u{6DD}", ownerUID: 0, groupGID: 0, post: .owner, observe: .all, source: "mark.conf:1")
            ])
    }

    @Test("a valid file: comments, blank lines, tabs, defaults, trailing '.' and '.>', user and group names, quotas")
    func parseValid() throws {
        let text = """
            # comment line

            reserve\torg.example.>   # defaults: owner=root group=root post=owner observe=all
            reserve com.example. owner=nobody group=nogroup post=group observe=none
            reserve net.example post=all post=none
            quota connections-per-uid 3
            quota subscriptions-per-uid 4
            quota outbound-bytes-per-uid 5
            quota retained-bytes-per-uid 6
            quota state-names-per-uid 7
            quota pattern-labels-per-uid 8
            """
        let configuration = try AccessConfiguration.parse(text, source: "ok.conf")
        #expect(
            configuration.rules == [
                .init(prefix: "org.example", ownerUID: 0, groupGID: 0, post: .owner, observe: .all, source: "ok.conf:3"),
                .init(prefix: "com.example", ownerUID: 65_534, groupGID: 65_534, post: .group, observe: .none, source: "ok.conf:4"),
                .init(prefix: "net.example", ownerUID: 0, groupGID: 0, post: .none, observe: .all, source: "ok.conf:5"),
            ])
        var quotas = AccessConfiguration.Quotas()
        quotas.connectionsPerUID = 3
        quotas.subscriptionsPerUID = 4
        quotas.outboundBytesPerUID = 5
        quotas.retainedBytesPerUID = 6
        quotas.stateNamesPerUID = 7
        quotas.patternLabelsPerUID = 8
        #expect(configuration.quotas == quotas)
        #expect(AccessConfiguration.Quotas() == {
            var defaults = AccessConfiguration.Quotas()
            defaults.connectionsPerUID = 256
            defaults.subscriptionsPerUID = 65_536
            defaults.outboundBytesPerUID = 64 * 1_024 * 1_024
            defaults.retainedBytesPerUID = 16 * 1_024 * 1_024
            defaults.stateNamesPerUID = 10_000
            defaults.patternLabelsPerUID = 16_384
            return defaults
        }(), "the documented defaults (PROTOCOL.md § 11.2)")
    }

    @Test("load(path:) reads a file and names it in errors")
    func loadFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("i4conf-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let good = directory.appendingPathComponent("good.conf").path
        try "reserve org.example post=all\n".write(toFile: good, atomically: true, encoding: .utf8)
        let loaded = try AccessConfiguration.load(path: good)
        #expect(loaded.rules.first?.source == "\(good):1")
        let bad = directory.appendingPathComponent("bad.conf").path
        try "reserve org.example\nreserve org.example post=maybe\n".write(toFile: bad, atomically: true, encoding: .utf8)
        do {
            _ = try AccessConfiguration.load(path: bad)
            Issue.record("\(bad) should not load")
        } catch {
            #expect(error.location == "\(bad):2")
        }
        let missing = directory.appendingPathComponent("missing.conf").path
        do {
            _ = try AccessConfiguration.load(path: missing)
            Issue.record("\(missing) should not load")
        } catch {
            #expect(error.description.contains(missing))
        }
    }
}
