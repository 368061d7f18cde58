import Foundation
import NotifyWire
import Testing

@testable import NotifyServer

/// The hand-over snapshot's format: every field survives, and bad bytes are refused with a reason, never a crash.
@Suite("Hand-over snapshot format")
struct HandoverSnapshotTests {
    /// A snapshot with one of everything: states, retained notifications, and connections in every phase with
    /// every policy, owed bytes that start mid-frame and a partly received frame.
    static let sample = HandoverSnapshot(
        instanceID: InstanceID(high: 0x0123_4567_89ab_cdef, low: 0xfedc_ba98_7654_3210), lastSequence: 4_242,
        lastConnectionNumber: 17,
        counters: {
            var counters = HandoverSnapshot.Counters()
            counters.connectionsAccepted = 17
            counters.posts = 4_242
            counters.deliveries = 9_000
            counters.merged = 12
            counters.dropped = 3
            counters.slowConsumerDisconnects = 1
            counters.acceptFailures = 2
            counters.connectionsRefused = 1
            return counters
        }(),
        states: [
            HandoverSnapshot.State(name: "user.1000.mode", value: 7, ownerUID: 1_000),
            HandoverSnapshot.State(name: "system.power", value: .max, ownerUID: 0),
        ],
        retained: [
            HandoverSnapshot.Retained(
                name: "config.changed", sequence: 4_200, sender: SenderCredentials(pid: 99, uid: 1_000, gid: 1_000),
                ownerUID: 1_000, payload: Array("v2".utf8)),
            HandoverSnapshot.Retained(
                name: "relayed.config", sequence: 4_201, sender: SenderCredentials(pid: 98, uid: 0, gid: 0),
                ownerUID: 0, payload: Array("from afar".utf8),
                origin: RelayOrigin(host: "web-1", uid: 1_000, gid: 100, pid: 4_242, sequence: 77)),
        ],
        peers: [
            HandoverSnapshot.PeerRecord(
                cookie: 0xC00C_1E, number: 3, credentials: SenderCredentials(pid: 4_321, uid: 1_000, gid: 100),
                groups: [100, 27], command: "observer", phase: .open, clientName: "observer \u{1F600}",
                helloFlags: HelloFlags.origins, suspendCount: 2,
                merged: 5, dropped: 1,
                subscriptions: [
                    HandoverSnapshot.Subscription(id: 1, pattern: "config.changed", policy: .coalesce),
                    HandoverSnapshot.Subscription(id: 2, pattern: "config.*", policy: .queue(limit: 100)),
                    HandoverSnapshot.Subscription(id: 9, pattern: "alerts.>", policy: .disconnect),
                    HandoverSnapshot.Subscription(
                        id: 10, pattern: "config.*", policy: .coalesce, watchesStates: true),
                    HandoverSnapshot.Subscription(
                        id: 11, pattern: "system.power", policy: .coalesce, watchesStates: true),
                    HandoverSnapshot.Subscription(
                        id: 12, pattern: "relayed.>", policy: .queue(limit: 10), marksRetained: true),
                ],
                outbound: [0x00, 0x2A, 0x85, 0x01], held: [0x00, 0x00, 0x00, 0x01, 0x84],
                inbound: [0x00, 0x00, 0x00, 0x09, 0x04]),
            HandoverSnapshot.PeerRecord(
                cookie: 0xC00C_1F, number: 17, credentials: SenderCredentials(pid: 0, uid: 0, gid: 0), groups: [],
                command: nil, phase: .awaitingHello, clientName: "", suspendCount: 0, merged: 0, dropped: 0,
                subscriptions: [], outbound: [], inbound: []),
            HandoverSnapshot.PeerRecord(
                cookie: 0xC00C_20, number: 12, credentials: SenderCredentials(pid: 5, uid: 65_534, gid: 65_534),
                groups: [65_534], command: "bad", phase: .closing, clientName: "bad", suspendCount: 0, merged: 0,
                dropped: 0, subscriptions: [], outbound: Array("error frame".utf8), inbound: []),
        ])

    static let fixturePath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/snapshot-v1.bin").path
    static let formatTwoFixturePath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/snapshot-v2.bin").path

    /// The sample as the formats before 3 could write it: without the state and marking subscriptions and the
    /// retained origins, which they could not express (the fixtures were written from the sample of their day,
    /// which had none).
    static var sampleBeforeFormatThree: HandoverSnapshot {
        var sample = Self.sample
        for index in sample.peers.indices {
            sample.peers[index].subscriptions.removeAll { $0.watchesStates || $0.marksRetained }
        }
        sample.retained.removeAll { $0.origin != nil }
        return sample
    }

    @Test("every field comes back as it was written")
    func roundTrip() throws {
        let decoded = try HandoverSnapshot(decoding: Self.sample.encoded())
        #expect(decoded == Self.sample)
    }

    /// The fixture was written by format 1 and is never regenerated: this test is what shows a format-3 daemon
    /// still takes over from a format-1 one. Format 1 had no `HELLO` flags: they read as 0.
    @Test("a snapshot written by format 1 (committed fixture) still loads; its connections have no HELLO flags")
    func formatOneLoads() throws {
        let bytes = try #require(FileManager.default.contents(atPath: Self.fixturePath), "missing \(Self.fixturePath)")
        var expected = Self.sampleBeforeFormatThree
        for index in expected.peers.indices { expected.peers[index].helloFlags = 0 }
        #expect(try HandoverSnapshot(decoding: Array(bytes)) == expected)
        #expect(Array(bytes[8..<10]) == [0, 1], "the fixture is format 1")
    }

    /// Written by the format-2 encoder (the daemon before state subscriptions) and never regenerated: version N
    /// loads N − 1. Format 2 had no subscription flags: every subscription reads as one to notifications.
    @Test("a snapshot written by format 2 (committed fixture) still loads; its subscriptions watch notifications")
    func previousFormatLoads() throws {
        let path = Self.formatTwoFixturePath
        let bytes = try #require(FileManager.default.contents(atPath: path), "missing \(path)")
        #expect(try HandoverSnapshot(decoding: Array(bytes)) == Self.sampleBeforeFormatThree)
        #expect(Array(bytes[8..<10]) == [0, 2], "the fixture is format 2")
        #expect(Self.sample.encoded()[8..<10] == [0, 3], "this daemon writes format 3")
    }

    @Test(
        "a subscription record with a flag other than states or marks-retained, or with both, is refused",
        arguments: [UInt8(0x03), 0x06, 0x0A])
    func unknownSubscriptionFlag(flags: UInt8) throws {
        var bytes = Self.sample.encoded()
        let decoded = try HandoverSnapshot(decoding: bytes)
        #expect(decoded.peers[0].subscriptions.filter(\.watchesStates).map(\.id) == [10, 11])
        #expect(decoded.peers[0].subscriptions.filter(\.marksRetained).map(\.id) == [12])
        // Subscription 11's record ends "system.power", policy 0, queue limit 0, flags 0x02: set other bits, and
        // a checksum that matches, so only the flag check can refuse it.
        let marker = Array("system.power".utf8) + [0, 0, 0, 0, 0, 0x02]
        let start = try #require(
            (0...(bytes.count - marker.count)).last { Array(bytes[$0..<($0 + marker.count)]) == marker })
        bytes[start + marker.count - 1] = flags
        let checksum = fnv1a(bytes[HandoverSnapshot.headerLength..<(bytes.count - 8)])
        for shift in 0..<8 { bytes[bytes.count - 1 - shift] = UInt8(truncatingIfNeeded: checksum >> (8 * UInt64(shift))) }
        #expect(throws: HandoverError.malformed("subscription 11 on connection 3 has flags 0x\(String(flags, radix: 16))")) {
            try HandoverSnapshot(decoding: bytes)
        }
    }

    @Test("every truncation is refused with a reason")
    func truncations() {
        let bytes = Self.sample.encoded()
        for length in 0..<bytes.count {
            #expect(throws: HandoverError.self, "\(length) of \(bytes.count) bytes") {
                try HandoverSnapshot(decoding: Array(bytes.prefix(length)))
            }
        }
    }

    @Test("a damaged byte anywhere in the body fails the checksum")
    func damage() {
        let bytes = Self.sample.encoded()
        for index in HandoverSnapshot.headerLength..<(bytes.count - 8) {
            var damaged = bytes
            damaged[index] ^= 0x40
            #expect(throws: HandoverError.checksumMismatch, "byte \(index)") { try HandoverSnapshot(decoding: damaged) }
        }
    }

    @Test("a newer format, or something else, is refused by name")
    func versionAndMagic() {
        var newer = Self.sample.encoded()
        newer[9] = 4  // version 4, big-endian at offset 8
        #expect(throws: HandoverError.unsupportedVersion(4)) { try HandoverSnapshot(decoding: newer) }
        #expect(HandoverError.unsupportedVersion(4).description.contains("formats 1 to 3"))
        #expect(throws: HandoverError.notASnapshot) { try HandoverSnapshot(decoding: Array("GIF89a and more".utf8)) }
    }

    @Test("fields that pass the checksum but make no sense are refused")
    func semanticChecks() {
        func refused(_ change: (inout HandoverSnapshot) -> Void) -> HandoverError? {
            var snapshot = Self.sample
            change(&snapshot)
            do {
                _ = try HandoverSnapshot(decoding: snapshot.encoded())
                return nil
            } catch {
                return error
            }
        }
        #expect(refused { $0.states[0].name = "bad name" } != nil)
        #expect(refused { $0.peers[0].subscriptions[1].pattern = "config.>.x" } != nil)
        #expect(refused { $0.peers[1].cookie = $0.peers[0].cookie } != nil)
        #expect(refused { $0.peers[1].number = 99 } != nil, "a number past the last one given out")
        #expect(refused { $0.peers[0].subscriptions[1].id = 1 } != nil)
        #expect(refused { $0.peers[1].subscriptions = $0.peers[0].subscriptions } != nil, "subscriptions before HELLO")
    }

    @Test("a connection with command text but no command is refused (found by FuzzSnapshot)")
    func commandTextWithoutCommand() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../Fuzz/crashes/snapshot-absent-command-with-text.input").standardized.path
        let input = try #require(FileManager.default.contents(atPath: path), "missing \(path)")
        #expect(input.first == 1, "mode 1: the rest is a body, framed here as the fuzz target frames it")
        let body = Array(input.dropFirst())
        var bytes = Array("NTFYSNAP".utf8) + [0, 1, 0, 0]
        withUnsafeBytes(of: UInt64(body.count).bigEndian) { bytes += $0 }
        bytes += body
        withUnsafeBytes(of: fnv1a(body[...]).bigEndian) { bytes += $0 }
        #expect(throws: HandoverError.self) { try HandoverSnapshot(decoding: bytes) }
    }

    @Test("a count larger than the bytes left is refused before anything is allocated")
    func hugeCount() {
        var writer = SnapshotWriter()
        for _ in 0..<12 { writer.u64(0) }  // instance id, sequence, connection number, counters
        writer.u32(.max)  // states
        var bytes = Array("NTFYSNAP".utf8) + [0, 1, 0, 0]
        withUnsafeBytes(of: UInt64(writer.bytes.count).bigEndian) { bytes += $0 }
        bytes += writer.bytes
        withUnsafeBytes(of: fnv1a(writer.bytes[...]).bigEndian) { bytes += $0 }
        #expect(throws: HandoverError.self) { try HandoverSnapshot(decoding: bytes) }
    }
}
