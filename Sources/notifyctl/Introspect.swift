import ArgumentParser
import Foundation
import Notify
import Synchronization

extension Notifyctl {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the daemon's figures.")

        @OptionGroup var connection: ConnectionOptions
        @Flag(name: .long, help: "Print JSON.") var json = false

        func run() async throws {
            try await reportingFailures {
                let center = try await connection.connect()
                let status = try await center.daemonStatus()
                let bridges = try await BridgeStatusReader.read(from: center)
                if json {
                    // The daemon's document, plus "bridges": what each notifyd-bridge last reported.
                    var object =
                        try JSONSerialization.jsonObject(with: Data(try JSONOutput.encode(status).utf8)) as? [String: Any]
                        ?? [:]
                    object["bridges"] = bridges.map(\.object)
                    let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
                    StandardStreams.output(JSONOutput.text(of: data))
                } else {
                    let rows: [(String, String)] = [
                        ("version", status.version), ("instance", status.instanceID), ("pid", "\(status.pid)"),
                        ("uptime", String(format: "%.0f s", status.uptimeSeconds)),
                        ("connections", "\(status.connections)"), ("subscriptions", "\(status.subscriptions)"),
                        ("names subscribed", "\(status.subscribedNames)"), ("patterns", "\(status.patterns)"),
                        ("names with state", "\(status.stateNames)"), ("retained", "\(status.retainedNames)"),
                        ("posts", "\(status.posts) (\(String(format: "%.1f", status.postsPerSecond))/s)"),
                        ("deliveries", "\(status.deliveries) (\(String(format: "%.1f", status.deliveriesPerSecond))/s)"),
                        ("merged", "\(status.merged)"), ("dropped", "\(status.dropped)"),
                        ("slow consumers disconnected", "\(status.slowConsumerDisconnects)"),
                        ("refused, no descriptor left", "\(status.connectionsRefused ?? 0) connections"),
                        ("memory", "\(status.residentMemoryBytes / 1024) KiB resident, \(status.outboundBytes) B queued, \(status.heldBytes) B held"),
                    ]
                    for (label, value) in rows { StandardStreams.output(label.padding(toLength: 28, withPad: " ", startingAt: 0) + value) }
                    for bridge in bridges {
                        StandardStreams.output("bridge".padding(toLength: 28, withPad: " ", startingAt: 0) + bridge.summary)
                    }
                }
                await center.close()
            }
        }
    }

    struct Names: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List names with subscribers, a state value or a retained notification.")

        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "Only names matching this pattern (e.g. 'org.example.>').") var pattern: String?
        @Flag(name: .long, help: "Print JSON.") var json = false

        func run() async throws {
            try await reportingFailures {
                let center = try await connection.connect()
                let names = try await center.daemonNames(matching: pattern)
                if json {
                    StandardStreams.output(try JSONOutput.encode(names))
                } else {
                    StandardStreams.output("SUBSCRIBERS  STATE                 RETAINED  NAME")
                    for name in names {
                        let state = name.state.map(String.init) ?? "-"
                        StandardStreams.output(
                            "\(pad(name.subscribers, 11))  \(state.padding(toLength: 20, withPad: " ", startingAt: 0))  "
                                + "\((name.hasRetained ? "yes" : "no").padding(toLength: 8, withPad: " ", startingAt: 0))  \(TerminalText.escaped(name.name))")
                    }
                }
                await center.close()
            }
        }
    }

    struct Clients: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List connected clients (all of them for root, your own otherwise).")

        @OptionGroup var connection: ConnectionOptions
        @Flag(name: .long, help: "Print JSON.") var json = false

        func run() async throws {
            try await reportingFailures {
                let center = try await connection.connect()
                let clients = try await center.daemonClients()
                if json {
                    StandardStreams.output(try JSONOutput.encode(clients))
                } else {
                    StandardStreams.output("    PID    UID  SUBS  PENDING     HELD  SUSPENDED  COMMAND")
                    for client in clients {
                        StandardStreams.output(
                            "\(pad(client.pid, 7))  \(pad(client.uid, 5))  \(pad(client.subscriptions, 4))  "
                                + "\(pad(client.pendingBytes, 7))  \(pad(client.heldBytes, 7))  "
                                + "\((client.suspended ? "yes" : "no").padding(toLength: 9, withPad: " ", startingAt: 0))  "
                                + "\(TerminalText.escaped(client.command ?? "?")) (\(TerminalText.escaped(client.clientName)))")
                    }
                }
                await center.close()
            }
        }
    }

    struct State: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Read, set or watch a name's state value (a 64-bit unsigned number).",
            subcommands: [Get.self, Set.self, Watch.self])

        struct Get: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Print the state value of a name, or 'unset' (exit status 0 either way).")
            @OptionGroup var connection: ConnectionOptions
            @Argument(help: "The name.") var name: String
            @Flag(name: .long, help: "Print JSON.") var json = false

            func run() async throws {
                try await reportingFailures {
                    try NotifyCenter.validate(name: name)
                    let center = try await connection.connect()
                    let value = try await center.state(of: name)
                    if json {
                        StandardStreams.output(#"{"name":\#(try JSONOutput.string(name)),"state":\#(value.map(String.init) ?? "null")}"#)
                    } else {
                        StandardStreams.output(value.map(String.init) ?? "unset")
                    }
                    await center.close()
                }
            }
        }

        struct Set: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Set the state value of a name.")
            @OptionGroup var connection: ConnectionOptions
            @Argument(help: "The name.") var name: String
            @Argument(help: "The value, 0 to 18446744073709551615.") var value: UInt64

            func run() async throws {
                try await reportingFailures {
                    try NotifyCenter.validate(name: name)
                    let center = try await connection.connect()
                    try await center.setState(value, for: name)
                    await center.close()
                }
            }
        }
    }
}

func pad(_ value: some BinaryInteger, _ width: Int) -> String {
    let text = "\(value)"
    return String(repeating: " ", count: max(0, width - text.count)) + text
}

/// JSON output with sorted keys, one document per line, safe on a terminal.
enum JSONOutput {
    static func encode<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return terminalSafe(String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    static func string(_ text: String) throws -> String { try encode(text) }

    /// A document made by `JSONSerialization`, safe on a terminal.
    static func text(of data: Data) -> String { terminalSafe(String(decoding: data, as: UTF8.self)) }

    /// `json` with what the encoders leave raw but a terminal acts on (``TerminalText/actsOnTerminal(_:)``: the
    /// encoders escape C0 controls themselves, not DEL, the C1 controls — a C1 CSI starts an escape sequence — or
    /// the bidirectional controls) written as `\uXXXX`. They can only occur inside strings, where that escape
    /// means the same.
    static func terminalSafe(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: needsEscape) else { return json }
        var result = ""
        result.unicodeScalars.reserveCapacity(json.unicodeScalars.count)
        for scalar in json.unicodeScalars {
            if needsEscape(scalar) {
                let hex = String(scalar.value, radix: 16)
                result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// C0 controls are left as they are: the encoders escape them inside strings, and outside strings they are
    /// JSON's own whitespace.
    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value >= 0x20 && TerminalText.actsOnTerminal(scalar)
    }
}

/// What each `notifyd-bridge` on this daemon last reported: the retained notifications under
/// `notifyd-bridge.status.` (PROTOCOL.md § 16), read as current values.
struct BridgeStatusReader {
    struct Report {
        var object: [String: Any]
        var sender: SenderCredentials

        /// One line: `web-1: NATS connected, exported 10, imported 4, …`.
        var summary: String {
            func count(_ key: String) -> Int { (object[key] as? NSNumber)?.intValue ?? 0 }
            let host = TerminalText.escaped(object["host"] as? String ?? "?")
            let connected = (object["nats_connected"] as? Bool) == true ? "NATS connected" : "NATS DISCONNECTED"
            let lost = count("export_dropped") + count("export_lost_in_flight") + count("import_gaps") + count("import_lost")
            return "\(host): \(connected), exported \(count("exported")), imported \(count("imported")), "
                + "lost \(lost), refused \(count("import_refused") + count("import_invalid_name") + count("import_too_large") + count("export_too_large")), "
                + "reconnects \(count("nats_reconnects")) (pid \(sender.pid) uid \(sender.uid))"
        }
    }

    static func read(from center: NotifyCenter) async throws -> [Report] {
        let received = Mutex<[(Data, SenderCredentials)]>([])
        let observation = try center.observe(
            "notifyd-bridge.status.>", on: .immediate, options: ObservationOptions(receivesCurrentValue: true)
        ) { notification in
            guard notification.isRetained else { return }
            received.withLock { $0.append((notification.payloadData, notification.sender)) }
        }
        // Current values come before the subscription's answer, and a round trip comes after that.
        try await center.synchronize()
        observation.cancel()
        let reports = received.withLock { $0 }.compactMap { data, sender -> Report? in
            guard var object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
            object["posted_by_pid"] = sender.pid
            object["posted_by_uid"] = sender.uid
            return Report(object: object, sender: sender)
        }
        return reports.sorted { ($0.object["host"] as? String ?? "") < ($1.object["host"] as? String ?? "") }
    }
}
