#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

extension Integration {
    /// `notifyd --replace`: a new notifyd process takes every connection and all state over from the running one,
    /// as nginx and HAProxy do for binary upgrades. The clients (the library, notifyctl, a raw client) see nothing.
    @Suite("notifyd --replace")
    struct ReplaceTests {
        @Test("a new notifyd takes over from the running one: no client reconnects, misses or repeats a notification")
        func replaceRunningDaemon() async throws {
            try await withIntegrationScope { scope in
                let socket = scope.socketPath
                let name = "replace.test"
                let first = try await scope.startDaemon()
                let listen = try scope.launch(.notifyctl, ["listen", "replace.*", "--socket", socket])
                let peer = try scope.launch(.testPeer, ["observe", "--socket", socket, "--name", name, "--target", "queue"])
                try await listen.waitForLine(containing: "listening", on: .stderr)
                try await peer.waitForLine(containing: "ready", on: .stdout)
                let raw = try await TestClient.connect(to: socket, name: "raw")
                _ = try await raw.hello()
                try await raw.subscribe(name, id: 1, policy: .queue(limit: 100_000))
                let poster = try await TestClient.connect(to: socket, name: "poster")
                _ = try await poster.hello()
                try await poster.setState("replace.state", 7)

                for index in 0..<50 { try await poster.postUnacknowledged(name, ByteBuffer(string: "before-\(index)")) }
                _ = try await poster.barrier()
                let second = try scope.launch(.notifyd, ["--socket", socket, "--log-level", "info", "--replace"])
                // Posted while the daemons change hands: they wait in the socket for the new one.
                for index in 0..<50 { try await poster.postUnacknowledged(name, ByteBuffer(string: "gap-\(index)")) }
                let firstEnd = try await first.child.waitForExit(timeout: 20)
                #expect(firstEnd == .exited(0), "\(first.child.diagnostics)")
                #expect(first.child.stderrText.contains("handed over"), "\(first.child.diagnostics)")
                try await second.waitForLine(containing: "took over", on: .stderr)
                for index in 0..<50 { try await poster.postUnacknowledged(name, ByteBuffer(string: "after-\(index)")) }
                _ = try await poster.barrier()

                let expected = ["before", "gap", "after"].flatMap { stage in (0..<50).map { "\(stage)-\($0)" } }
                var sequences: [UInt64] = []
                var payloads: [String] = []
                while payloads.count < expected.count {
                    let notification = try await raw.nextNotification()
                    sequences.append(notification.sequence)
                    payloads.append(String(buffer: notification.payload))
                }
                #expect(payloads == expected)
                #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $1 == $0 + 1 }, "\(sequences)")
                #expect(try await poster.state(of: "replace.state") == 7)
                try await raw.expectQuiet("nothing but the notifications: no GOODBYE, no WELCOME")

                try await peer.waitForLine(containing: " after-49", on: .stdout)
                try await listen.waitForLine(containing: " after-49", on: .stdout)
                #expect(peer.stdoutLines.filter { $0.contains(" before-") || $0.contains(" gap-") || $0.contains(" after-") }.count == 150)
                for client in [peer, listen] {
                    #expect(!client.stderrText.contains("disconnected"), "the library saw nothing\n\(client.diagnostics)")
                }

                // The successor created nothing, but stops like the first would have: GOODBYE, then its socket file goes.
                second.send(SIGTERM)
                #expect(try await second.waitForExit(timeout: 20) == .exited(0), "\(second.diagnostics)")
                #expect(!UnixSocket.fileExists(at: socket), "the successor removes the socket file its predecessor made")
                try await peer.waitForLine(containing: "event: disconnected", on: .stderr)
            }
        }

        @Test("a daemon using most of its descriptor limit hands over every connection")
        func replaceNearTheDescriptorLimit() async throws {
            try await withIntegrationScope { scope in
                let socket = scope.socketPath
                // 64 descriptors: 35 clients and the daemon's own fit, but not a second descriptor per client.
                let first = try scope.launch(.notifyd, ["--socket", socket, "--log-level", "info"], after: "ulimit -n 64")
                _ = try await poll("notifyd to accept connections", timeout: 20) { () throws -> Bool? in
                    if let termination = first.termination { throw TestFailure("notifyd \(termination)\n\(first.diagnostics)") }
                    return UnixSocket.acceptsConnections(at: socket) ? true : nil
                }
                let poster = try await TestClient.connect(to: socket, name: "poster")
                _ = try await poster.hello()
                var subscribers: [TestClient] = []
                for index in 0..<35 {
                    let subscriber = try await TestClient.connect(to: socket, name: "subscriber \(index)")
                    _ = try await subscriber.hello()
                    try await subscriber.subscribe("replace.limit", id: 1)
                    subscribers.append(subscriber)
                }
                let second = try scope.launch(.notifyd, ["--socket", socket, "--log-level", "info", "--replace"])
                #expect(try await first.waitForExit(timeout: 20) == .exited(0), "\(first.diagnostics)")
                try await second.waitForLine(containing: "took over", on: .stderr)
                try await poster.post("replace.limit", "after")
                for subscriber in subscribers {
                    let notification = try await subscriber.nextNotification()
                    #expect(String(buffer: notification.payload) == "after", "\(subscriber.name)")
                }
                #expect(!second.stderrText.contains("left during the hand-over"), "\(second.diagnostics)")
                second.send(SIGTERM)
                #expect(try await second.waitForExit(timeout: 20) == .exited(0), "\(second.diagnostics)")
            }
        }

        @Test("--replace while the running daemon is out of descriptors: refused or delayed, never a dropped client")
        func replaceAtTheDescriptorLimit() async throws {
            try await withIntegrationScope { scope in
                let socket = scope.socketPath
                let first = try await DaemonProcess.start(socketPath: socket) {
                    try scope.launch($0, $1, after: "ulimit -n 40")
                }.child
                // Fill the running daemon's descriptor table.
                var clients: [TestClient] = []
                while true {
                    try #require(clients.count < 64, "40 descriptors and still no refusal after \(clients.count) clients")
                    let client = try await TestClient.connect(to: socket, name: "filler \(clients.count)")
                    try? await client.send(.hello(ClientFrame.Hello(clientName: client.name)))
                    guard case .welcome = try await client.next() else { break }
                    clients.append(client)
                }
                // At the limit the running daemon either cannot accept the request yet (it retries) or cannot copy
                // its listening socket (it refuses, and says to try again). Either way its clients stay served.
                let second = try scope.launch(.notifyd, ["--socket", socket, "--log-level", "info", "--replace"])
                _ = try await poll("the replace request to be refused or held", timeout: 20) { () -> Bool? in
                    second.termination != nil || first.stderrText.contains("cannot accept a replace request now") ? true : nil
                }
                var successor = second
                if second.termination != nil {
                    #expect(second.stderrText.contains("try again later"), "\(second.diagnostics)")
                    #expect(first.isRunning, "\(first.diagnostics)")
                    guard case .pong = try await clients[0].request({ .ping(requestID: $0) }).reply else {
                        Issue.record("a client of the daemon that refused got no PONG\n\(first.diagnostics)")
                        return
                    }
                }
                // Descriptors freed: the request (or a new one) is served, and every client still connected is handed over.
                for client in clients.suffix(10) { await client.close() }
                clients.removeLast(10)
                if second.termination != nil {
                    successor = try scope.launch(.notifyd, ["--socket", socket, "--log-level", "info", "--replace"])
                }
                #expect(try await first.waitForExit(timeout: 20) == .exited(0), "\(first.diagnostics)")
                try await successor.waitForLine(containing: "took over", on: .stderr)
                #expect(!first.stderrText.contains("hand-over failed"), "\(first.diagnostics)")
                for client in clients {
                    guard case .pong = try await client.request({ .ping(requestID: $0) }).reply else {
                        Issue.record("\(client.name) got no PONG after the hand-over\n\(successor.diagnostics)")
                        return
                    }
                }
                successor.send(SIGTERM)
                #expect(try await successor.waitForExit(timeout: 20) == .exited(0), "\(successor.diagnostics)")
            }
        }

        @Test("--replace with a configuration file that does not parse fails before taking anything over")
        func replaceWithABrokenConfiguration() async throws {
            try await withIntegrationScope { scope in
                let first = try await scope.startDaemon()
                let client = try await TestClient.connect(to: scope.socketPath, name: "stays")
                try await client.hello()
                let broken = scope.directory + "/broken.conf"
                try "prefix com.example. post=nobody-such-group-or-user\nthis is not a rule\n".write(
                    toFile: broken, atomically: true, encoding: .utf8)
                let second = try await scope.run(
                    .notifyd, ["--socket", scope.socketPath, "--log-level", "info", "--replace", "--config", broken])
                #expect(second.termination != .exited(0), "\(second.diagnostics)")
                #expect(second.stderrText.contains("invalid configuration"), "\(second.diagnostics)")
                // The running daemon kept its client and goes on serving it.
                #expect(first.child.isRunning, "\(first.child.diagnostics)")
                guard case .pong = try await client.request({ .ping(requestID: $0) }).reply else {
                    Issue.record("the client of the running daemon got no PONG\n\(first.child.diagnostics)")
                    return
                }
                await client.close()
                try await first.stop()
            }
        }

        @Test("--replace with no daemon running starts one as usual")
        func replaceWithNothingRunning() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await DaemonProcess.start(socketPath: scope.socketPath, options: ["--replace"]) {
                    try scope.launch($0, $1)
                }
                #expect(daemon.child.stderrText.contains("starting afresh"), "\(daemon.child.diagnostics)")
                try await daemon.stop()
            }
        }
    }
}
