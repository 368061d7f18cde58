#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NIOCore
import NotifyWire
import NotifyTestSupport
import Testing

extension Integration {
    /// notifyd as a systemd service, tested with systemd's own tools and a fake service manager (PID 1 is not
    /// systemd here): socket activation with `systemd-socket-activate`, `sd_notify` messages on a test-owned
    /// `NOTIFY_SOCKET`, the watchdog, graceful shutdown with `GOODBYE`.
    @Suite("systemd service")
    struct SystemdTests {
        @Test("systemd-socket-activate: the first client is served; the daemon leaves the socket it did not create")
        func socketActivation() async throws {
            try await withIntegrationScope { scope in
                let socketPath = scope.directory + "/a.sock"
                let manager = try ServiceManagerSocket(path: scope.directory + "/n.sock")
                let notifyd = try BuildProducts.url(of: .notifyd)
                // systemd-socket-activate binds and listens, then execs notifyd (same pid) on the first connection,
                // passing LISTEN_FDS/LISTEN_PID; -E passes our variables (it clears the rest of the environment).
                // It runs as the foreground child of a shell, which exits with its status. (The shell was first
                // needed by Foundation's Process, whose exit watching broke when systemd-socket-activate closed every
                // inherited descriptor; SpawnedProcess waits by pid, so now it is only a wrapper.)
                let activator = try scope.launchProcess(
                    URL(fileURLWithPath: "/bin/sh"),
                    [
                        "-c", #"systemd-socket-activate "$@"; exit $?"#, "sh",
                        "-l", socketPath, "-E", "NOTIFY_SOCKET=\(manager.path)", notifyd.path, "--log-level", "debug",
                    ])
                try await activator.waitForLine(containing: "Listening on \(socketPath)", on: .stderr)
                #expect(UnixSocket.socketFileExists(at: socketPath))

                // The first client's connection starts the daemon, and is served.
                let name = "activation.test"
                let listen = try scope.launch(.notifyctl, ["listen", name, "--count", "1", "--socket", socketPath])
                try await listen.waitForLine(containing: "listening", on: .stderr)
                let ready = try await manager.waitForMessage("READY=1") { $0.notifyAssignments["READY"] == "1" }
                let mainPID = try #require(ready.message.notifyAssignments["MAINPID"].flatMap { Int32($0) })
                do {
                    let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(mainPID)/exe")
                    #expect(executable == notifyd.path, "MAINPID=\(mainPID) should be notifyd itself")
                    try await activator.waitForLine(containing: "socket-activated", on: .stderr)

                    let post = try await scope.run(.notifyctl, ["post", name, "activated", "--wait", "--socket", socketPath])
                    #expect(post.termination == .exited(0), "\(post.diagnostics)")
                    #expect(try deliveredCount(fromPostOutput: post.stdoutLines) == 1, "\(post.diagnostics)")
                    #expect(try await listen.waitForExit() == .exited(0), "\(listen.diagnostics)")
                    #expect(listen.stdoutLines.contains { $0.hasSuffix(" activated") }, "\(listen.diagnostics)")

                    kill(mainPID, SIGTERM)
                    try await manager.waitForMessage("STOPPING=1") { $0.notifyAssignments["STOPPING"] == "1" }
                    // The shell exits with notifyd's status.
                    #expect(try await activator.waitForExit() == .exited(0), "\(activator.diagnostics)")
                    #expect(
                        UnixSocket.socketFileExists(at: socketPath),
                        "notifyd must not remove a socket it did not create\n\(activator.diagnostics)")
                } catch {
                    kill(mainPID, SIGKILL)  // not a child of ours: the scope would not stop it
                    throw error
                }
            }
        }

        @Test("NOTIFY_SOCKET: READY=1 once the socket is connectable, STATUS= lines, STOPPING=1 on SIGTERM")
        func readyStatusStopping() async throws {
            try await withIntegrationScope { scope in
                let manager = try ServiceManagerSocket(path: scope.directory + "/n.sock")
                let daemon = try scope.launchProcess(
                    try BuildProducts.url(of: .notifyd),
                    ["--socket", scope.socketPath, "--status-interval", "0.2", "--log", "stderr"],
                    environment: SystemdEnvironment.daemonEnvironment(["NOTIFY_SOCKET": manager.path]))

                let ready = try await manager.waitForMessage("READY=1") { $0.notifyAssignments["READY"] == "1" }
                // Connect as soon as READY arrives: the handshake must work right away.
                let client = try await TestClient.connect(to: scope.socketPath, name: "ready-check")
                try await client.hello()
                let assignments = ready.message.notifyAssignments
                #expect(ready.earlier.isEmpty, "nothing before READY=1: \(ready.earlier)")
                #expect(assignments["MAINPID"] == "\(daemon.pid)", "\(ready.message)")
                #expect(assignments["STATUS"] == "0 connections, 0 subscriptions, 0 notifications/s", "\(ready.message)")

                // The status follows the daemon's state.
                try await client.subscribe("status.test", id: 1)
                let status = try await manager.waitForMessage("STATUS= with the subscription") {
                    $0.notifyAssignments["STATUS"]?.hasPrefix("1 connection, 1 subscription, ") == true
                }
                #expect(status.message.notifyAssignments["STATUS"]?.hasSuffix(" notifications/s") == true)

                daemon.send(SIGTERM)
                let stopping = try await manager.waitForMessage("STOPPING=1") { $0.notifyAssignments["STOPPING"] == "1" }
                #expect(stopping.message.notifyAssignments["STATUS"]?.contains("stopping") == true)
                #expect(try await daemon.waitForExit() == .exited(0), "\(daemon.diagnostics)")
                #expect(!UnixSocket.fileExists(at: scope.socketPath), "a socket notifyd created is removed")
            }
        }

        @Test("WATCHDOG_USEC: pings at half the timeout from the event loop; a stalled loop stops them")
        func watchdog() async throws {
            try await withIntegrationScope { scope in
                let manager = try ServiceManagerSocket(path: scope.directory + "/n.sock")
                // Watchdog timeout 500 ms: a ping every 250 ms. Three seconds after READY a test hook blocks the
                // event loop for five seconds.
                let daemon = try scope.launchProcess(
                    try BuildProducts.url(of: .notifyd),
                    [
                        "--socket", scope.socketPath, "--log", "stderr",
                        "--test-stall-event-loop-after", "3", "--test-stall-event-loop-seconds", "5",
                    ],
                    environment: SystemdEnvironment.daemonEnvironment([
                        "NOTIFY_SOCKET": manager.path, "WATCHDOG_USEC": "500000",
                    ]))
                try await manager.waitForMessage("READY=1") { $0.notifyAssignments["READY"] == "1" }

                // Cadence: about 8 pings in 2 s; at least 3 leaves room for a slow machine.
                let window = try await manager.collect(for: 2)
                let pings = window.filter { $0 == "WATCHDOG=1" }.count
                #expect(pings >= 3, "expected at least 3 WATCHDOG=1 in 2 s with WATCHDOG_USEC=500000, got \(window)")

                // The hook logs from the event loop right before blocking it: every ping sent before is in the
                // socket already, so after draining it nothing may arrive while the loop is stuck.
                try await daemon.waitForLine(containing: "test hook: stalling the event loop", on: .stderr)
                _ = manager.drain()
                let stalled = try await manager.collect(for: 1.5)
                #expect(
                    !stalled.contains("WATCHDOG=1"),
                    "no ping may arrive while the event loop is stuck, got \(stalled)\n\(daemon.diagnostics)")

                // Once the loop runs again, so do the pings.
                try await daemon.waitForLine(containing: "event loop released", on: .stderr)
                try await manager.waitForMessage("WATCHDOG=1 after the stall") { $0 == "WATCHDOG=1" }

                daemon.send(SIGTERM)
                try await manager.waitForMessage("STOPPING=1") { $0.notifyAssignments["STOPPING"] == "1" }
                #expect(try await daemon.waitForExit() == .exited(0), "\(daemon.diagnostics)")
            }
        }

        @Test("SIGTERM: queued notifications reach a subscriber that keeps reading, then GOODBYE, then EOF")
        func gracefulShutdown() async throws {
            try await withIntegrationScope { scope in
                let name = "shutdown.test"
                let count = 2_000
                let daemon = try await scope.startDaemon()

                // A library client, to check what the library reports. It observes a quiet name, so that it does not
                // print thousands of lines while the test reads its standard error.
                let peer = try scope.launch(
                    .testPeer, ["observe", "--socket", scope.socketPath, "--name", name + ".quiet", "--target", "queue"])
                try await peer.waitForLine(containing: "ready", on: .stdout)

                // A raw subscriber that stops reading for now, so that the daemon still holds data for it.
                let subscriber = try await TestClient.connect(to: scope.socketPath, name: "raw-subscriber")
                try await subscriber.hello()
                try await subscriber.subscribe(name, id: 1)
                try await subscriber.setReading(false)

                // 2,000 posts of 1 KiB: far more than the socket buffers hold. The PONG after them means they are
                // all queued to every subscriber (PROTOCOL.md § 6.5).
                let poster = try await TestClient.connect(to: scope.socketPath, name: "raw-poster")
                try await poster.hello()
                var frames: [ClientFrame] = []
                for index in 0..<count {
                    var payload = ByteBuffer(string: "\(index):")
                    payload.writeRepeatingByte(UInt8(ascii: "x"), count: 1_024 - payload.readableBytes)
                    frames.append(.post(.init(requestID: UInt32(index + 1), name: name, payload: payload)))
                }
                try await poster.send(frames)
                try await poster.expectQuiet("the posts are not acknowledged")

                daemon.child.send(SIGTERM)

                // Everything posted before SIGTERM arrives, in order; then GOODBYE; then end of file.
                var received = 0
                var goodbye: GoodbyeFrame?
                try await subscriber.setReading(true)
                while case .frame(let event) = try await subscriber.nextEvent() {
                    let frame = event.frame
                    switch frame {
                    case .notification(let notification):
                        let text = String(buffer: notification.payload)
                        #expect(text.hasPrefix("\(received):"), "notification \(received) out of order: \(text.prefix(12))")
                        received += 1
                    case .goodbye(let frame):
                        goodbye = frame
                    default:
                        Issue.record("unexpected frame \(frame.messageType) during shutdown")
                    }
                    if goodbye != nil {
                        #expect(try await subscriber.expectEnd() == .endOfFile, "GOODBYE must be the last frame")
                        break
                    }
                }
                #expect(received == count, "the subscriber should receive all \(count) notifications")
                let farewell = try #require(goodbye, "the daemon should say GOODBYE")
                #expect((250...1_000).contains(farewell.reconnectAfterMilliseconds), "\(farewell)")
                #expect(farewell.reason.contains("shutting down"), "\(farewell)")

                #expect(try await daemon.child.waitForExit() == .exited(0), "\(daemon.child.diagnostics)")
                let notice = try await peer.waitForLine(containing: "event: disconnected", on: .stderr)
                #expect(notice.contains("the daemon is shutting down"), "the library should say why: \(notice)")
                // The first reconnection waits what the daemon asked for (250–1,000 ms), not the 50 ms initial back-off.
                let delay = notice.components(separatedBy: "reconnecting in ").last.flatMap { Int($0.prefix { $0.isNumber }) }
                #expect(delay.map { (250...1_000).contains($0) } == true, "\(notice)")
                #expect(peer.isRunning, "\(peer.diagnostics)")
            }
        }

        @Test("--log journal: log entries go to the journal, not to standard error")
        func journalLogging() async throws {
            try await withIntegrationScope { scope in
                let daemon = try scope.launch(.notifyd, ["--socket", scope.socketPath, "--log", "journal"])
                _ = try await poll("notifyd to accept connections", timeout: 20) { () throws -> Bool? in
                    if let termination = daemon.termination { throw TestFailure("notifyd \(termination)\n\(daemon.diagnostics)") }
                    return UnixSocket.acceptsConnections(at: scope.socketPath) ? true : nil
                }
                let post = try await scope.run(.notifyctl, ["post", "journal.test", "--wait", "--socket", scope.socketPath])
                #expect(post.termination == .exited(0), "\(post.diagnostics)")
                daemon.send(SIGTERM)
                #expect(try await daemon.waitForExit() == .exited(0), "\(daemon.diagnostics)")
                #expect(daemon.stderrLines.isEmpty, "with --log journal nothing is logged to stderr: \(daemon.stderrLines)")
            }
        }
    }
}
