#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ArgumentParser
import Foundation
import Notify

extension Notifyctl {
    struct Top: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A live view of the daemon: rates, the subscribers furthest behind, the most observed names.",
            discussion: """
                Refreshes every --interval seconds, like top. Quit with q or Ctrl-C; it also ends when the terminal \
                goes away. --once prints one screen and exits (for scripts). Root sees every client, others their own.
                """)

        @OptionGroup var connection: ConnectionOptions
        @Option(name: .long, help: "Seconds between refreshes.") var interval: Double = 1
        @Option(name: .long, help: "Rows of subscribers and of names to show.") var rows: Int = 10
        @Flag(name: .long, help: "Print one screen and exit.") var once = false

        func validate() throws {
            guard interval >= 0.1, interval <= 86_400 else {
                throw ValidationError("--interval must be at least 0.1 and at most 86400 seconds, got \(interval)")
            }
            guard rows >= 1 else { throw ValidationError("--rows must be at least 1") }
        }

        func run() async throws {
            try await reportingFailures {
                let center = try await connection.connect()
                if once {
                    for line in try await Self.screen(center, rows: rows) { StandardStreams.output(line) }
                    await center.close()
                    return
                }
                let terminal = LiveTerminal()
                defer { terminal.restore() }
                while true {
                    let lines = try await Self.screen(center, rows: rows)
                    guard terminal.draw(lines) else { break }  // the terminal is gone
                    if terminal.waitForQuit(seconds: interval) { break }
                }
                await center.close()
            }
        }

        /// One screen: the daemon's figures, the connections furthest behind (by bytes owed), and the names with
        /// the most subscribers.
        static func screen(_ center: NotifyCenter, rows: Int) async throws -> [String] {
            let status = try await center.daemonStatus()
            let clients = try await center.daemonClients()
            let names = try await center.daemonNames(matching: nil)
            var lines = [
                "notifyd \(status.version), pid \(status.pid), up \(Int(status.uptimeSeconds)) s — "
                    + "\(status.connections) connections, \(status.subscriptions) subscriptions",
                String(
                    format: "posts %.1f/s, deliveries %.1f/s; merged %llu, dropped %llu; %llu KiB resident, %d B queued, %d B held",
                    status.postsPerSecond, status.deliveriesPerSecond, status.merged, status.dropped,
                    status.residentMemoryBytes / 1024, status.outboundBytes, status.heldBytes),
                "",
                "FURTHEST BEHIND    LAG BYTES  LAG NOTIF  OLDEST s  DROPPED  CONN    PID    UID  COMMAND",
            ]
            let behind = clients.sorted {
                ($0.lagBytes ?? $0.pendingBytes + $0.heldBytes, $0.connection)
                    > ($1.lagBytes ?? $1.pendingBytes + $1.heldBytes, $1.connection)
            }
            for client in behind.prefix(rows) {
                lines.append(
                    "                 \(pad(client.lagBytes ?? client.pendingBytes + client.heldBytes, 11))  "
                        + "\(pad(client.lagNotifications ?? 0, 9))  "
                        + String(format: "%8.1f", client.lagOldestSeconds ?? 0) + "  \(pad(client.dropped, 7))  "
                        + "\(pad(client.connection, 4))  \(pad(client.pid, 5))  \(pad(client.uid, 5))  "
                        + "\(TerminalText.escaped(client.command ?? "?")) (\(TerminalText.escaped(client.clientName)))"
                        + (client.suspended ? " [suspended]" : ""))
            }
            lines += ["", "MOST OBSERVED      SUBSCRIBERS  NAME"]
            for name in names.sorted(by: { ($0.subscribers, $1.name) > ($1.subscribers, $0.name) }).prefix(rows) {
                lines.append("                   \(pad(name.subscribers, 11))  \(TerminalText.escaped(name.name))")
            }
            return lines
        }
    }
}

/// The terminal of `notifyctl top`: the alternate screen, no echo, keys read one at a time, and everything put
/// back on the way out (q, Ctrl-C, or the terminal closing).
final class LiveTerminal {
    private var saved = termios()
    private let isTerminal = isatty(STDIN_FILENO) == 1
    private var restored = false

    init() {
        // Ctrl-C is read as a key (ISIG off), so the terminal is restored by the normal path, not a handler.
        if isTerminal, tcgetattr(STDIN_FILENO, &saved) == 0 {
            var raw = saved
            raw.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG)
            tcsetattr(STDIN_FILENO, TCSANOW, &raw)
        }
        _ = write("\u{1b}[?1049h\u{1b}[?25l")  // alternate screen, hide the cursor
    }

    /// Clears the screen and draws `lines`; `false` when the terminal is gone.
    func draw(_ lines: [String]) -> Bool {
        write("\u{1b}[H\u{1b}[2J" + lines.joined(separator: "\r\n") + "\r\n")
    }

    /// Waits up to `seconds` for a key: `true` for q, Q or Ctrl-C, or when the terminal closed.
    func waitForQuit(seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return false }
            var descriptor = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(left * 1_000))
            if ready < 0 { if errno == EINTR { continue } else { return true } }
            if ready == 0 { return false }
            if descriptor.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return true }
            var key: UInt8 = 0
            let count = read(STDIN_FILENO, &key, 1)
            if count <= 0 { return true }  // end of input: the terminal is gone
            if key == UInt8(ascii: "q") || key == UInt8(ascii: "Q") || key == 3 { return true }
        }
    }

    /// Puts the terminal back as it was.
    func restore() {
        guard !restored else { return }
        restored = true
        _ = write("\u{1b}[?25h\u{1b}[?1049l")
        if isTerminal { tcsetattr(STDIN_FILENO, TCSANOW, &saved) }
    }

    @discardableResult
    private func write(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }
}
