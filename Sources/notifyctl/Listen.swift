import ArgumentParser
import Foundation
import Notify

extension Notifyctl {
    struct Listen: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print notifications as they arrive, one line each.",
            discussion: """
                Human form: time, name, sender pid and uid, and the payload as text (or hex when it is not UTF-8). \
                The human form's time is local. With --json, one JSON object per line with the keys time (UTC, \
                ISO 8601 with milliseconds and a Z), name, sequence, pid, uid, gid, merged (notifications merged \
                into this one), dropped_before (notifications lost just before it), retained (true for a name's \
                current value sent by --current) and payload (text) or payload_hex, plus message when the payload \
                is a JSON object or array (a typed message), plus origin (host, uid, gid, pid, sequence) for a \
                notification relayed from another host by notifyd-bridge, whose pid, uid and gid are then the \
                bridge's. The human form shows such a one as [from HOST pid P uid U via pid B]. \
                The line "listening for ..." on standard error comes \
                once the daemon has every subscription: a post made after it is received.
                """)

        @OptionGroup var connection: ConnectionOptions

        @Argument(help: "One or more notification names or patterns ('*' one label, '>' the rest: 'org.example.>').")
        var names: [String]

        @Flag(name: .long, help: "Start with each name's current (retained) notification, if any.")
        var current = false

        @Option(
            name: .long,
            help: "When this listener falls behind: coalesce (latest per name), queue:N (keep N, drop the oldest), or disconnect.")
        var policy: PolicyArgument = PolicyArgument(policy: .coalesce)

        @Option(name: .long, help: "Exit 0 after this many notifications.")
        var count: Int?

        @Option(
            name: .long,
            help: "Stop after this many seconds: with --count, a failure (exit 1) if fewer arrived; otherwise exit 0.")
        var timeout: Double?

        @Flag(name: .long, help: "Print one JSON object per line.")
        var json = false

        func validate() throws {
            if names.isEmpty { throw ValidationError("give at least one notification name") }
            if let count, count < 1 { throw ValidationError("--count must be at least 1") }
            // Also refuses nan and inf (and what no clock can wait for), which trapped converting to nanoseconds.
            if let timeout, !(timeout > 0 && timeout <= 1e9) {
                throw ValidationError("--timeout must be a number of seconds above 0 and at most 1000000000, got \(timeout)")
            }
        }

        func run() async throws {
            try await reportingFailures {
                for name in names { try NotifyCenter.validate(pattern: name) }
                let center = try await connection.connect()
                // One ordered stream for all names: handlers run on the I/O thread and only hand off.
                let (stream, continuation) = AsyncStream<ReceivedNotification>.makeStream()
                var observations: [Observation] = []
                let options = ObservationOptions(policy: policy.policy, receivesCurrentValue: current)
                for name in names {
                    observations.append(
                        try center.observe(name, on: .immediate, options: options) { continuation.yield($0) })
                }
                try await center.synchronize()
                StandardStreams.error("listening for \(names.joined(separator: ", "))")

                let events = center.connectionEvents()
                let eventTask = Task {
                    for await event in events {
                        StandardStreams.error("notifyctl: \(event)")
                    }
                }
                defer { eventTask.cancel() }

                let received = try await receive(stream, continuation: continuation)
                if let count, received < count {
                    throw CommandFailure(
                        "timed out after \(timeout!) seconds: received \(received) of \(count) notifications")
                }
                withExtendedLifetime(observations) {}
                await center.close()
            }
        }

        /// Prints notifications until `count` arrived or the timeout passed; returns how many arrived.
        private func receive(
            _ stream: AsyncStream<ReceivedNotification>,
            continuation: AsyncStream<ReceivedNotification>.Continuation
        ) async throws -> Int {
            if let timeout {
                Task {
                    try? await Task.sleep(nanoseconds: UInt64(timeout * 1e9))
                    continuation.finish()
                }
            }
            var received = 0
            let formatter = LineFormatter(json: json)
            var previous: ReceivedNotification?
            for await notification in stream {
                // Overlapping names and patterns each hand the same notification to this process's stream, one
                // right after the other: print it once. (Sequence numbers alone would not do: they start again
                // at 1 when the daemon restarts.)
                if notification.sequence != 0, notification == previous { continue }
                previous = notification
                StandardStreams.output(formatter.format(notification))
                received += 1
                if let count, received >= count { break }
            }
            return received
        }
    }
}

/// Formats a notification as a human-readable or JSON line.
struct LineFormatter {
    let json: Bool

    func format(_ notification: ReceivedNotification) -> String {
        let now = Date()
        if json {
            var object: [String: Any] = [
                // UTC with its zone, so a line read elsewhere or later means one instant.
                "time": now.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)),
                "name": notification.name,
                "sequence": notification.sequence,
                "merged": notification.mergedCount,
                "dropped_before": notification.droppedBefore,
                "retained": notification.isRetained,
                "pid": notification.sender.pid,
                "uid": notification.sender.uid,
                "gid": notification.sender.gid,
            ]
            if let origin = notification.origin {
                object["origin"] = [
                    "host": origin.host, "uid": origin.uid, "gid": origin.gid, "pid": origin.pid,
                    "sequence": origin.sequence,
                ] as [String: Any]
            }
            if let text = notification.payloadString {
                object["payload"] = text
                // A typed message's payload is a JSON object (PROTOCOL.md § 12): show it decoded too.
                if let parsed = try? JSONSerialization.jsonObject(with: Data(notification.payload)),
                    parsed is [String: Any] || parsed is [Any]
                {
                    object["message"] = parsed
                }
            } else {
                object["payload_hex"] = hex(notification.payload)
            }
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
            return JSONOutput.text(of: data)
        }
        let payload = notification.payloadString.map { $0.isEmpty ? "" : " " + TerminalText.escaped($0) }
            ?? " (hex) " + hex(notification.payload)
        var notes = ""
        if notification.isRetained { notes += " (current value)" }
        if notification.mergedCount > 0 { notes += " (+\(notification.mergedCount) merged)" }
        if notification.droppedBefore > 0 { notes += " (\(notification.droppedBefore) dropped before)" }
        let time = now.formatted(Date.ISO8601FormatStyle(timeZone: .current).time(includingFractionalSeconds: true))
        let sender =
            notification.origin.map {
                "from \(TerminalText.escaped($0.host)) pid \($0.pid) uid \($0.uid) via pid \(notification.sender.pid)"
            } ?? "pid \(notification.sender.pid) uid \(notification.sender.uid)"
        return "\(time) \(TerminalText.escaped(notification.name)) [\(sender)]\(notes)\(payload)"
    }

    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }
}

/// `--policy coalesce | queue:N | disconnect`.
struct PolicyArgument: ExpressibleByArgument {
    var policy: DeliveryPolicy

    init(policy: DeliveryPolicy) { self.policy = policy }

    init?(argument: String) {
        switch argument {
        case "coalesce": policy = .coalesce
        case "disconnect": policy = .disconnect
        default:
            guard argument.hasPrefix("queue:"), let limit = UInt32(argument.dropFirst(6)), limit > 0 else { return nil }
            policy = .queue(limit: limit)
        }
    }
}
