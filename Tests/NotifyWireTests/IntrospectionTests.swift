import Foundation
import NIOCore
import NotifyWire
import Testing

/// The JSON documents of `QUERY_RESULT` (PROTOCOL.md § 11.3): key names are fixed snake_case.
@Suite("Introspection JSON")
struct IntrospectionTests {
    /// PROTOCOL.md § 11.3, written out independently of DaemonFigures.swift.
    static let statusKeys: Set<String> = [
        "version", "instance_id", "pid", "uptime_seconds", "connections", "subscriptions", "subscribed_names",
        "patterns", "state_names", "retained_names", "posts", "deliveries", "posts_per_second",
        "deliveries_per_second", "merged", "dropped", "slow_consumer_disconnects", "resident_memory_bytes",
        "outbound_bytes", "held_bytes", "configuration_reloads", "last_reload_error", "accept_failures",
        "connections_refused",
    ]
    static let nameKeys: Set<String> = ["name", "subscribers", "state", "has_retained"]
    static let clientKeys: Set<String> = [
        "connection", "pid", "uid", "gid", "command", "client_name", "subscriptions", "pending_bytes", "held_bytes",
        "suspended", "merged", "dropped", "lag_notifications", "lag_bytes", "lag_oldest_seconds",
    ]

    static let status = DaemonStatus(
        version: "0.1.0", instanceID: "00112233445566778899aabbccddeeff", pid: 4242, uptimeSeconds: 3600.25,
        connections: 2, subscriptions: 3, subscribedNames: 1, patterns: 1, stateNames: 1, retainedNames: 1,
        posts: 42, deliveries: 40, postsPerSecond: 0.5, deliveriesPerSecond: 0.5, merged: 5, dropped: 300,
        slowConsumerDisconnects: 0, residentMemoryBytes: 9_437_184, outboundBytes: 0, heldBytes: 1_024,
        configurationReloads: 2, lastReloadError: "/etc/notifyd/notifyd.conf:3: unknown keyword 'frobnicate'",
        acceptFailures: 0, connectionsRefused: 0)
    static let names = [
        DaemonName(name: "org.example.battery.level", subscribers: 0, state: 4_294_967_338, hasRetained: false),
        DaemonName(name: "org.example.battery.low", subscribers: 1, state: nil, hasRetained: true),
    ]
    static let clients = [
        DaemonClient(
            connection: 1, pid: 2001, uid: 1000, gid: 100, command: "notifyctl", clientName: "notifyctl",
            subscriptions: 1, pendingBytes: 0, heldBytes: 1_024, suspended: true, merged: 5, dropped: 300,
            lagNotifications: 16, lagBytes: 1_024, lagOldestSeconds: 12.5),
        DaemonClient(
            connection: 2, pid: 1234, uid: 1000, gid: 100, command: nil, clientName: "sensor", subscriptions: 2,
            pendingBytes: 0, heldBytes: 0, suspended: false, merged: 0, dropped: 0, lagNotifications: 0, lagBytes: 0,
            lagOldestSeconds: 0),
    ]

    static func encode(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(value)
    }

    static func object(_ data: Data) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func objects(_ data: Data) throws -> [[String: Any]] {
        try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
    }

    @Test("status keys")
    func statusKeys() throws {
        let keys = Set(try Self.object(Self.encode(Self.status)).keys)
        #expect(keys == Self.statusKeys)
    }

    @Test("names keys; state is left out when no state was set")
    func nameKeys() throws {
        let entries = try Self.objects(Self.encode(Self.names))
        #expect(entries.count == 2)
        #expect(Set(entries[0].keys) == Self.nameKeys)
        #expect(Set(entries[1].keys) == Self.nameKeys.subtracting(["state"]))
        #expect(entries[0]["state"] as? NSNumber == NSNumber(value: 4_294_967_338 as UInt64))
    }

    @Test("clients keys; command is left out when unknown")
    func clientKeys() throws {
        let entries = try Self.objects(Self.encode(Self.clients))
        #expect(entries.count == 2)
        #expect(Set(entries[0].keys) == Self.clientKeys)
        #expect(Set(entries[1].keys) == Self.clientKeys.subtracting(["command"]))
    }

    @Test("the documents decode from snake_case JSON and round-trip")
    func roundTrip() throws {
        let decoder = JSONDecoder()
        #expect(try decoder.decode(DaemonStatus.self, from: Self.encode(Self.status)) == Self.status)
        #expect(try decoder.decode([DaemonName].self, from: Self.encode(Self.names)) == Self.names)
        #expect(try decoder.decode([DaemonClient].self, from: Self.encode(Self.clients)) == Self.clients)
    }

    @Test("the JSON of query-result.hex is a names answer")
    func vectorJSON() throws {
        let file = try VectorFile.load("query-result.hex")
        guard case .queryResult(let requestID, let json)? = decodeOne(file.bytes, as: ServerFrame.self).frame else {
            Issue.record("query-result.hex is not a QUERY_RESULT")
            return
        }
        #expect(requestID == 16)
        let names = try JSONDecoder().decode([DaemonName].self, from: Data(json.readableBytesView))
        #expect(names == [DaemonName(name: "org.example.battery.low", subscribers: 1, state: nil, hasRetained: true)])
        // Byte for byte what the daemon's encoder (sorted keys) produces for that value.
        #expect(try Self.encode(names) == Data(json.readableBytesView))
    }

    /// The `json` code blocks of PROTOCOL.md § 11.3, in order: status, names, clients.
    static func specExamples() throws -> [Data] {
        let spec = try String(
            contentsOf: VectorFile.directory.deletingLastPathComponent().appendingPathComponent("PROTOCOL.md"),
            encoding: .utf8)
        let start = try #require(spec.range(of: "### 11.3 Introspection documents")).upperBound
        let end = spec[start...].range(of: "\n## ")?.lowerBound ?? spec.endIndex
        var blocks: [Data] = []
        var current: [Substring]?
        for line in spec[start..<end].split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```json") {
                current = []
            } else if line.hasPrefix("```"), let lines = current {
                blocks.append(Data(lines.joined(separator: "\n").utf8))
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    @Test("the examples in PROTOCOL.md decode and use exactly the documented keys")
    func specificationExamples() throws {
        let blocks = try Self.specExamples()
        try #require(blocks.count == 3)
        let decoder = JSONDecoder()
        _ = try decoder.decode(DaemonStatus.self, from: blocks[0])
        #expect(Set(try Self.object(blocks[0]).keys) == Self.statusKeys)
        let names = try decoder.decode([DaemonName].self, from: blocks[1])
        #expect(!names.isEmpty)
        for entry in try Self.objects(blocks[1]) {
            #expect(Set(entry.keys).isSubset(of: Self.nameKeys))
            #expect(Set(entry.keys).isSuperset(of: Self.nameKeys.subtracting(["state"])))
        }
        let clients = try decoder.decode([DaemonClient].self, from: blocks[2])
        #expect(!clients.isEmpty)
        for entry in try Self.objects(blocks[2]) {
            #expect(Set(entry.keys).isSubset(of: Self.clientKeys))
            #expect(Set(entry.keys).isSuperset(of: Self.clientKeys.subtracting(["command"])))
        }
        // The examples are what the encoder writes for those values (modulo the layout of the document).
        let status = try decoder.decode(DaemonStatus.self, from: blocks[0])
        #expect(try Self.object(Self.encode(status)) as NSDictionary == Self.object(blocks[0]) as NSDictionary)
    }

    @Test("query kinds")
    func queryKinds() {
        #expect(QueryKind(rawValue: 0) == nil)
        #expect(QueryKind(rawValue: 1) == .status)
        #expect(QueryKind(rawValue: 2) == .names)
        #expect(QueryKind(rawValue: 3) == .clients)
        #expect(QueryKind(rawValue: 4) == nil)
    }
}
