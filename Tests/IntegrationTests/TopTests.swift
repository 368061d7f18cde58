#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NIOCore
import NotifyTestSupport
import Testing

extension Integration {
    /// `notifyctl top` in a real terminal: tmux runs it, `send-keys` types, `capture-pane` reads the screen.
    @Suite("notifyctl top")
    struct TopTests {
        /// Runs tmux with `arguments` on the test's own tmux server (socket `server`).
        static func tmux(_ scope: IntegrationScope, _ server: String, _ arguments: [String]) async throws -> String {
            let tmux = try SystemdEnvironment.program("tmux")
            let result = try await scope.runProcess(tmux, ["-S", server] + arguments, timeout: 20)
            guard result.termination == .exited(0) else { throw TestFailure("tmux \(arguments): \(result.diagnostics)") }
            return result.stdoutLines.joined(separator: "\n")
        }

        @Test("a subscriber that stops reading rises to the top; q quits and gives the terminal back")
        func stoppedSubscriberRises() async throws {
            try await withIntegrationScope { scope in
                let socket = scope.socketPath
                let daemon = try await scope.startDaemon()
                let server = scope.directory + "/tmux.sock"
                let notifyctl = try BuildProducts.url(of: .notifyctl).path
                let quiet = try await TestClient.connect(to: socket, name: "quiet")
                _ = try await quiet.hello()
                try await quiet.subscribe("top.flood", id: 1)
                // The tmux server outlives this command, so it must get no pipe of the harness's to hold open:
                // spawned with /dev/null for its standard streams.
                let tmux = try SystemdEnvironment.program("tmux").path
                let started = try SpawnedProcess.runDiscardingOutput(
                    executable: tmux,
                    arguments: ["-S", server, "new-session", "-d", "-x", "160", "-y", "40",
                                "\(notifyctl) top --socket \(socket) --interval 0.2"])
                #expect(started == .exited(0), "tmux new-session \(started)")
                defer { _ = try? SpawnedProcess.runDiscardingOutput(executable: tmux, arguments: ["-S", server, "kill-server"]) }
                _ = try await poll("top to draw its first screen", timeout: 20) { () async throws -> Bool? in
                    try await Self.tmux(scope, server, ["capture-pane", "-p"]).contains("FURTHEST BEHIND") ? true : nil
                }

                // A subscriber that stops reading while a poster floods its name.
                let stalled = try await TestClient.connect(to: socket, name: "stalled-reader", receiveBufferSize: 4_096)
                _ = try await stalled.hello()
                try await stalled.subscribe("top.flood", id: 1, policy: .queue(limit: 100_000))
                try await stalled.setReading(false)
                let poster = try await TestClient.connect(to: socket, name: "poster")
                _ = try await poster.hello()
                let payload = ByteBuffer(string: String(repeating: "x", count: 1_000))
                for _ in 0..<2_000 { try await poster.postUnacknowledged("top.flood", payload) }
                _ = try await poster.barrier()

                let screen = try await poll("the stalled subscriber at the top", timeout: 20) { () async throws -> String? in
                    let screen = try await Self.tmux(scope, server, ["capture-pane", "-p"])
                    let lines = screen.split(separator: "\n")
                    guard let header = lines.firstIndex(where: { $0.contains("FURTHEST BEHIND") }), header + 1 < lines.count
                    else { return nil }
                    return lines[header + 1].contains("(stalled-reader)") ? screen : nil
                }
                #expect(screen.contains("connections"))
                #expect(screen.contains("top.flood"), "the most observed names")

                _ = try await Self.tmux(scope, server, ["send-keys", "q"])
                _ = try await poll("top to quit and the shell's screen to come back", timeout: 20) { () async throws -> Bool? in
                    // The session ends with its only window's program.
                    let tmux = try SystemdEnvironment.program("tmux")
                    let listed = try await scope.runProcess(tmux, ["-S", server, "list-sessions"], timeout: 20)
                    return listed.termination == .exited(0) ? nil : true
                }
                try await stalled.setReading(true)
                try await daemon.stop()
            }
        }

        @Test("--once prints one screen without terminal codes and exits 0")
        func once() async throws {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startDaemon()
                let result = try await scope.run(.notifyctl, ["top", "--once", "--socket", scope.socketPath])
                #expect(result.termination == .exited(0), "\(result.diagnostics)")
                #expect(result.stdoutLines.contains { $0.hasPrefix("FURTHEST BEHIND") })
                #expect(!result.stdoutLines.joined().contains("\u{1b}"), "no escape codes in --once output")
                try await daemon.stop()
            }
        }
    }
}
