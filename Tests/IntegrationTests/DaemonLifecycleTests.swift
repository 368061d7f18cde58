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
    /// Clients outlive the daemon: they notice it going away, reconnect to its successor and resubscribe.
    @Suite("daemon lifecycle")
    struct DaemonLifecycleTests {
        @Test("observers keep working across a SIGKILL and a new daemon on the same socket")
        func restartAfterKill() async throws {
            try await withIntegrationScope { scope in
                let name = "restart.test"
                let socket = scope.socketPath
                let first = try await scope.startDaemon()
                let peer = try scope.launch(.testPeer, ["observe", "--socket", socket, "--name", name, "--target", "queue"])
                let listen = try scope.launch(.notifyctl, ["listen", name, "--socket", socket])
                try await peer.waitForLine(containing: "ready", on: .stdout)
                try await listen.waitForLine(containing: "listening", on: .stderr)

                let before = try await scope.run(.notifyctl, ["post", name, "before", "--wait", "--socket", socket])
                #expect(try deliveredCount(fromPostOutput: before.stdoutLines) == 2, "\(before.diagnostics)")
                try await peer.waitForLine(containing: " before", on: .stdout)
                try await listen.waitForLine(containing: " before", on: .stdout)

                let killed = try await first.kill()
                #expect(killed == .signaled(SIGKILL), "\(first.child.diagnostics)")
                #expect(UnixSocket.socketFileExists(at: socket), "a killed daemon leaves its socket file behind")
                try await peer.waitForLine(containing: "event: disconnected", on: .stderr)
                try await listen.waitForLine(containing: "disconnected", on: .stderr)

                // The new daemon must replace the stale socket file.
                let second = try await scope.startDaemon()
                try await peer.waitForLine(containing: "daemon restarted: yes", on: .stderr)
                try await peer.waitForLine(containing: "resubscribed", on: .stderr)
                try await listen.waitForLine(containing: "daemon restarted: yes", on: .stderr)

                try await scope.postUntilDelivered(name, payload: "after", toAtLeast: 2)
                try await peer.waitForLine(containing: " after", on: .stdout)
                try await listen.waitForLine(containing: " after", on: .stdout)
                #expect(peer.isRunning, "\(peer.diagnostics)")
                #expect(listen.isRunning, "\(listen.diagnostics)")

                try await second.stop()
            }
        }

        @Test("SIGTERM: the daemon exits 0 and removes its socket; a connected listener notices and keeps going")
        func gracefulStop() async throws {
            try await withIntegrationScope { scope in
                let name = "sigterm.test"
                let socket = scope.socketPath
                let daemon = try await scope.startDaemon()
                let listen = try scope.launch(.notifyctl, ["listen", name, "--socket", socket])
                let peer = try scope.launch(.testPeer, ["observe", "--socket", socket, "--name", name, "--target", "immediate"])
                try await listen.waitForLine(containing: "listening", on: .stderr)
                try await peer.waitForLine(containing: "ready", on: .stdout)

                try await daemon.stop()  // checks exit status 0 and that the socket file is gone

                let listenNotice = try await listen.waitForLine(containing: "disconnected", on: .stderr)
                #expect(listenNotice.contains("shutting-down"), "the listener should learn why: \(listenNotice)")
                let peerNotice = try await peer.waitForLine(containing: "event: disconnected", on: .stderr)
                #expect(peerNotice.contains("shutting-down"), "the peer should learn why: \(peerNotice)")
                #expect(listen.isRunning, "notifyctl listen keeps running and reconnecting\n\(listen.diagnostics)")
                #expect(peer.isRunning, "\(peer.diagnostics)")

                // A successor daemon gets both back.
                let successor = try await scope.startDaemon()
                try await peer.waitForLine(containing: "resubscribed", on: .stderr)
                try await scope.postUntilDelivered(name, payload: "welcome-back", toAtLeast: 2)
                try await listen.waitForLine(containing: " welcome-back", on: .stdout)
                try await peer.waitForLine(containing: " welcome-back", on: .stdout)

                for client in [listen, peer] {
                    client.send(SIGTERM)
                    let end = try await client.waitForExit()
                    #expect(end == .signaled(SIGTERM) || end == .exited(0), "\(client.diagnostics)")
                }
                try await successor.stop()
            }
        }

        @Test("SIGINT stops the daemon as cleanly as SIGTERM")
        func interrupt() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startDaemon()
                let listen = try scope.launch(.notifyctl, ["listen", "sigint.test", "--socket", scope.socketPath])
                try await listen.waitForLine(containing: "listening", on: .stderr)
                try await daemon.stop(signal: SIGINT)  // checks exit status 0 and that the socket file is gone
                try await listen.waitForLine(containing: "disconnected", on: .stderr)
            }
        }

        @Test("a second daemon on a live socket refuses to start and leaves the first one serving")
        func secondDaemonRefuses() async throws {
            try await withDaemon { scope, first in
                let second = try await scope.run(.notifyd, ["--socket", scope.socketPath])
                #expect(second.termination == .exited(1), "\(second.diagnostics)")
                #expect(
                    second.stderrText.contains("already listening at \(scope.socketPath)"), "\(second.diagnostics)")

                #expect(first.child.isRunning, "\(first.child.diagnostics)")
                #expect(UnixSocket.acceptsConnections(at: scope.socketPath), "the first daemon's socket must survive")
                let post = try await scope.run(.notifyctl, ["post", "still.here", "--wait", "--socket", scope.socketPath])
                #expect(post.termination == .exited(0), "\(post.diagnostics)")
                #expect(try deliveredCount(fromPostOutput: post.stdoutLines) == 0, "\(post.diagnostics)")
            }
        }

        @Test("a file that is not a socket in the way: the daemon refuses and leaves the file alone")
        func notASocketInTheWay() async throws {
            try await withIntegrationScope { scope in
                let path = scope.directory + "/not-a-socket"
                let contents = Data("keep me".utf8)
                try contents.write(to: URL(fileURLWithPath: path))
                let daemon = try await scope.run(.notifyd, ["--socket", path])
                #expect(daemon.termination == .exited(1), "\(daemon.diagnostics)")
                #expect(daemon.stderrText.contains("not a socket"), "\(daemon.diagnostics)")
                #expect(FileManager.default.contents(atPath: path) == contents, "the file must be left untouched")
            }
        }

        @Test("SIGTERM: fire-and-forget posts still in the socket of a connection the daemon had stopped reading reach their subscriber before GOODBYE; that connection's other requests past its bound go unanswered")
        func lastReadAtShutdown() async throws {
            try await withIntegrationScope { scope in
                let limit = 65_536
                let daemon = try await scope.startOpenDaemon(["--outbound-limit", "\(limit)"])
                let subscriber = try await TestClient.connect(to: scope.socketPath, name: "subscriber")
                try await subscriber.hello()
                try await subscriber.subscribe("drain.last", id: 1, policy: .queue(limit: 1_000))
                // A poster that reads none of its replies: the daemon stops reading it once they pass the bound.
                let poster = try await connectUnreadQuerier(to: scope.socketPath, name: "poster", queries: 2_000)
                _ = try await poll("the daemon to stop reading the poster (its replies over the bound)", timeout: 60,
                                   interval: .milliseconds(20)) { () throws -> Bool? in
                    let clients = try await subscriber.query([DaemonClient].self, .clients)
                    return clients.first(where: { $0.clientName == "poster" }).map { $0.pendingBytes > limit } == true ? true : nil
                }
                // These stay in the socket's buffer: nothing of this connection is read until the stop.
                let posts = 100
                var buffer = ByteBuffer()
                for index in 1...posts {
                    ClientFrame.post(ClientFrame.Post(requestID: 0, name: "drain.last", payload: ByteBuffer(string: "\(index)")))
                        .encode(into: &buffer)
                }
                try await poster.sendBuffer(buffer)

                daemon.send(SIGTERM)
                let (frames, _) = try await subscriber.framesUntilEnd(timeout: .seconds(30))
                // The poster's replies stayed bounded: the queries past its bound were dropped, not answered (2,000
                // answers of ~750 bytes would be 1.5 MB against a bound of 64 KiB), and GOODBYE came last.
                try await poster.setReading(true)
                let (posterFrames, _) = try await poster.framesUntilEnd(timeout: .seconds(30))
                let answers = posterFrames.filter { if case .queryResult = $0 { true } else { false } }.count
                #expect(answers < 2_000 / 2, "\(answers) of 2,000 queries answered at the stop")
                if case .goodbye = posterFrames.last {} else { Issue.record("the poster's last frame is not GOODBYE") }
                let payloads = frames.compactMap { frame -> String? in
                    guard case .notification(let notification) = frame else { return nil }
                    return String(buffer: notification.payload)
                }
                #expect(payloads == (1...posts).map { "\($0)" }, "\(payloads.count) of \(posts) posts delivered before the stop")
                guard case .goodbye = frames.last else {
                    Issue.record("the subscriber's last frame is not GOODBYE: \(frames.last.map { "\($0.summary)" } ?? "none")")
                    return
                }
                let end = try await daemon.waitForExit(timeout: 30)
                #expect(end == .exited(0), "\(daemon.diagnostics)")
            }
        }
    }
}
