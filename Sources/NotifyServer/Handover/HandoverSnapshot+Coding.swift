import NotifyWire

/// Why a snapshot cannot be loaded. The successor then serves the handed-over sockets as new connections and
/// sends each a `GOODBYE`, so their clients reconnect and resubscribe as after a crash.
package enum HandoverError: Error, Equatable, CustomStringConvertible {
    /// The bytes do not start with the snapshot magic.
    case notASnapshot
    /// Written by a format this daemon does not read (a newer daemon's).
    case unsupportedVersion(UInt16)
    /// The checksum over the body does not match: the snapshot was damaged.
    case checksumMismatch
    /// The body ends early, holds a value out of range, or has bytes after its end.
    case malformed(String)

    /// How this reads in the log.
    package var description: String {
        switch self {
        case .notASnapshot: "not a notifyd snapshot (wrong magic)"
        case .unsupportedVersion(let version):
            "snapshot format \(version) is not supported (this daemon reads formats \(HandoverSnapshot.oldestReadableVersion) to \(HandoverSnapshot.formatVersion))"
        case .checksumMismatch: "the snapshot's checksum does not match its contents"
        case .malformed(let what): "malformed snapshot: \(what)"
        }
    }
}

// The format (all integers big-endian; `protocol/PROTOCOL.md` § 15 describes it field by field):
//   magic "NTFYSNAP" · u16 version · u16 0 · u64 body length · body · u64 FNV-1a of the body
// The version changes whenever the body's layout does; a daemon reads its own version and the one before, so an
// upgrade by one release always keeps its clients.
extension HandoverSnapshot {
    /// The version this daemon writes.
    /// Format 2 added each connection's `HELLO` flags (after its client name); format 3 each subscription's
    /// `SUBSCRIBE` flags that last (after its queue limit: the states and marks-retained flags) and each retained
    /// notification's relay origin (after its payload). Format 3 was extended in place with marks-retained and the
    /// origin before any release wrote it.
    package static let formatVersion: UInt16 = 3
    /// The oldest version this daemon reads: format 1 still, since format 2 only added fields that read as 0
    /// without it (and the format-1 fixture keeps that tested).
    package static let oldestReadableVersion: UInt16 = 1
    /// The `SUBSCRIBE` flags a subscription record keeps (format 3): states and marks-retained outlast the
    /// request (send-retained does not).
    static let keptSubscribeFlags: SubscribeFlags = [.states, .marksRetained]
    static let magic: [UInt8] = Array("NTFYSNAP".utf8)
    /// Bytes before the body: magic, version, reserved, body length.
    static let headerLength = 8 + 2 + 2 + 8

    /// The snapshot as bytes.
    package func encoded() -> [UInt8] {
        // One buffer, sized up front: the header, the body after it (its length filled in at the end), the
        // checksum. Grown by doubling instead, a snapshot owing megabytes to stopped clients was copied and
        // faulted in several times over.
        var body = SnapshotWriter()
        body.bytes.reserveCapacity(estimatedLength)
        body.raw(Self.magic)
        body.u16(Self.formatVersion)
        body.u16(0)
        body.u64(0)
        body.u64(instanceID.high)
        body.u64(instanceID.low)
        body.u64(lastSequence)
        body.u64(lastConnectionNumber)
        for value in [
            counters.connectionsAccepted, counters.posts, counters.deliveries, counters.merged, counters.dropped,
            counters.slowConsumerDisconnects, counters.acceptFailures, counters.connectionsRefused,
        ] { body.u64(value) }
        body.u32(UInt32(states.count))
        for state in states {
            body.string(state.name)
            body.u64(state.value)
            body.u32(state.ownerUID)
        }
        body.u32(UInt32(retained.count))
        for entry in retained {
            body.string(entry.name)
            body.u64(entry.sequence)
            body.credentials(entry.sender)
            body.u32(entry.ownerUID)
            body.bytes(entry.payload)
            body.u8(entry.origin == nil ? 0 : 1)
            if let origin = entry.origin {
                body.string(origin.host)
                body.u32(origin.uid)
                body.u32(origin.gid)
                body.u32(origin.pid)
                body.u64(origin.sequence)
            }
        }
        body.u32(UInt32(peers.count))
        for peer in peers {
            body.u64(peer.cookie)
            body.u64(peer.number)
            body.credentials(peer.credentials)
            body.u32(UInt32(peer.groups.count))
            for group in peer.groups { body.u32(group) }
            body.u8(peer.command == nil ? 0 : 1)
            body.string(peer.command ?? "")
            body.u8(peer.phase.rawValue)
            body.string(peer.clientName)
            body.u32(peer.helloFlags)
            body.u32(peer.suspendCount)
            body.u64(peer.merged)
            body.u64(peer.dropped)
            body.u32(UInt32(peer.subscriptions.count))
            for subscription in peer.subscriptions {
                body.u32(subscription.id)
                body.string(subscription.pattern)
                body.u8(subscription.policy.code)
                body.u32(subscription.policy.queueLimit)
                var flags: SubscribeFlags = []
                if subscription.watchesStates { flags.insert(.states) }
                if subscription.marksRetained { flags.insert(.marksRetained) }
                body.u8(flags.rawValue)
            }
            body.bytes(peer.outbound)
            body.bytes(peer.held)
            body.bytes(peer.inbound)
        }
        let bodyLength = UInt64(body.bytes.count - Self.headerLength)
        withUnsafeBytes(of: bodyLength.bigEndian) { length in
            body.bytes.replaceSubrange((Self.headerLength - 8)..<Self.headerLength, with: length)
        }
        body.u64(fnv1a(body.bytes[Self.headerLength...]))
        return body.bytes
    }

    /// About how many bytes ``encoded()`` takes (a little more, so the buffer is not grown on the way).
    private var estimatedLength: Int {
        var length = Self.headerLength + 8 + 128
        for state in states { length += 2 + state.name.utf8.count + 12 }
        for entry in retained {
            length += 128 + entry.name.utf8.count + entry.payload.count + (entry.origin?.host.utf8.count ?? 0)
        }
        for peer in peers {
            length += 128 + 4 * peer.groups.count + (peer.command?.utf8.count ?? 0) + peer.clientName.utf8.count
            length += peer.outbound.count + peer.held.count + peer.inbound.count
            for subscription in peer.subscriptions { length += 12 + subscription.pattern.utf8.count }
        }
        return length
    }

    /// Reads a snapshot, checking every field: names and patterns against the grammar, policies, counts against
    /// the bytes that remain.
    package init(decoding bytes: [UInt8]) throws(HandoverError) {
        guard bytes.count >= Self.magic.count, Array(bytes[0..<Self.magic.count]) == Self.magic else {
            throw .notASnapshot
        }
        var header = SnapshotReader(bytes[...])
        _ = try header.raw(Self.magic.count)
        let version = try header.u16()
        guard (Self.oldestReadableVersion...Self.formatVersion).contains(version) else {
            throw .unsupportedVersion(version)
        }
        guard try header.u16() == 0 else { throw .malformed("reserved header field is not 0") }
        let length = try header.u64()
        guard length <= UInt64(bytes.count - Self.headerLength), bytes.count - Self.headerLength - Int(length) == 8 else {
            throw .malformed("body length \(length) does not match the \(bytes.count) bytes given")
        }
        let body = bytes[Self.headerLength..<(Self.headerLength + Int(length))]
        var trailer = SnapshotReader(bytes[(Self.headerLength + Int(length))...])
        guard try trailer.u64() == fnv1a(body) else { throw .checksumMismatch }

        var reader = SnapshotReader(body)
        instanceID = InstanceID(high: try reader.u64(), low: try reader.u64())
        lastSequence = try reader.u64()
        lastConnectionNumber = try reader.u64()
        counters = Counters()
        counters.connectionsAccepted = try reader.u64()
        counters.posts = try reader.u64()
        counters.deliveries = try reader.u64()
        counters.merged = try reader.u64()
        counters.dropped = try reader.u64()
        counters.slowConsumerDisconnects = try reader.u64()
        counters.acceptFailures = try reader.u64()
        counters.connectionsRefused = try reader.u64()
        states = []
        for _ in 0..<(try reader.count(minimumBytesEach: 2 + 8 + 4)) {
            states.append(State(name: try reader.name(), value: try reader.u64(), ownerUID: try reader.u32()))
        }
        retained = []
        for _ in 0..<(try reader.count(minimumBytesEach: 2 + 8 + 12 + 4 + 4 + (version >= 3 ? 1 : 0))) {
            var entry = Retained(
                name: try reader.name(), sequence: try reader.u64(), sender: try reader.credentials(),
                ownerUID: try reader.u32(), payload: try reader.byteField())
            if version >= 3, try reader.flag() {
                let host = try reader.string()
                guard !host.isEmpty, host.utf8.count <= RelayOrigin.maxHostLength else {
                    throw .malformed("the origin host of retained '\(entry.name)' is empty or too long")
                }
                entry.origin = RelayOrigin(
                    host: host, uid: try reader.u32(), gid: try reader.u32(), pid: try reader.u32(),
                    sequence: try reader.u64())
            }
            retained.append(entry)
        }
        peers = []
        var numbers = Set<UInt64>()
        var cookies = Set<UInt64>()
        for _ in 0..<(try reader.count(minimumBytesEach: 8 + 8 + 12 + 4 + 1 + 2 + 1 + 2 + 4 + 8 + 8 + 4 + 4 + 4 + 4)) {
            let cookie = try reader.u64()
            let number = try reader.u64()
            guard cookies.insert(cookie).inserted else { throw .malformed("socket cookie \(cookie) appears twice") }
            guard numbers.insert(number).inserted, number <= lastConnectionNumber else {
                throw .malformed("connection number \(number) repeats or exceeds the last one given out")
            }
            let credentials = try reader.credentials()
            var groups: [UInt32] = []
            for _ in 0..<(try reader.count(minimumBytesEach: 4)) { groups.append(try reader.u32()) }
            let hasCommand = try reader.flag()
            let command = try reader.string()
            guard hasCommand || command.isEmpty else {
                throw .malformed("connection \(number) has no command but command text")
            }
            let phaseCode = try reader.u8()
            guard let phase = Phase(rawValue: phaseCode) else {
                throw .malformed("connection \(number) is in unknown phase \(phaseCode)")
            }
            let clientName = try reader.string()
            let helloFlags = version >= 2 ? try reader.u32() : 0
            let suspendCount = try reader.u32()
            let merged = try reader.u64()
            let dropped = try reader.u64()
            var subscriptions: [Subscription] = []
            var ids = Set<UInt32>()
            for _ in 0..<(try reader.count(minimumBytesEach: 4 + 2 + 1 + 4 + (version >= 3 ? 1 : 0))) {
                let id = try reader.u32()
                guard ids.insert(id).inserted else { throw .malformed("subscription id \(id) repeats on connection \(number)") }
                let pattern = try reader.pattern()
                let code = try reader.u8()
                let limit = try reader.u32()
                guard let policy = DeliveryPolicy(code: code, queueLimit: limit) else {
                    throw .malformed("policy \(code) with queue limit \(limit) on connection \(number)")
                }
                let flags = SubscribeFlags(rawValue: version >= 3 ? try reader.u8() : 0)
                guard flags.subtracting(Self.keptSubscribeFlags).isEmpty, flags != Self.keptSubscribeFlags else {
                    throw .malformed("subscription \(id) on connection \(number) has flags 0x\(String(flags.rawValue, radix: 16))")
                }
                subscriptions.append(
                    Subscription(
                        id: id, pattern: pattern, policy: policy, watchesStates: flags.contains(.states),
                        marksRetained: flags.contains(.marksRetained)))
            }
            guard phase != .awaitingHello || subscriptions.isEmpty else {
                throw .malformed("connection \(number) has subscriptions before its handshake")
            }
            peers.append(
                PeerRecord(
                    cookie: cookie, number: number, credentials: credentials, groups: groups,
                    command: hasCommand ? command : nil, phase: phase, clientName: clientName, helloFlags: helloFlags,
                    suspendCount: suspendCount, merged: merged, dropped: dropped, subscriptions: subscriptions,
                    outbound: try reader.byteField(), held: try reader.byteField(), inbound: try reader.byteField()))
        }
        guard reader.isAtEnd else { throw .malformed("\(reader.remaining) bytes after the last connection") }
    }
}

/// FNV-1a, 64 bits: catches a damaged snapshot (not an attacker: only the daemon's own user can hand one over).
func fnv1a(_ bytes: ArraySlice<UInt8>) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in bytes {
        hash ^= UInt64(byte)
        hash &*= 0x0000_0100_0000_01b3
    }
    return hash
}

/// Appends big-endian fields.
struct SnapshotWriter {
    var bytes: [UInt8] = []

    mutating func raw(_ data: [UInt8]) { bytes.append(contentsOf: data) }
    mutating func u8(_ value: UInt8) { bytes.append(value) }
    mutating func u16(_ value: UInt16) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func u32(_ value: UInt32) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func u64(_ value: UInt64) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
    /// A string: u16 length + UTF-8 (names, patterns and client names are all shorter than 64 KiB).
    mutating func string(_ value: String) {
        let utf8 = value.utf8.prefix(Int(UInt16.max))
        u16(UInt16(utf8.count))
        bytes.append(contentsOf: utf8)
    }
    /// Bytes: u32 length + bytes.
    mutating func bytes(_ value: [UInt8]) {
        u32(UInt32(value.count))
        raw(value)
    }
    mutating func credentials(_ value: SenderCredentials) {
        u32(value.pid)
        u32(value.uid)
        u32(value.gid)
    }
}

/// Reads big-endian fields, failing with ``HandoverError/malformed(_:)`` at the first one cut short.
struct SnapshotReader {
    private let input: ArraySlice<UInt8>
    private var position: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.input = bytes
        self.position = bytes.startIndex
    }

    var remaining: Int { input.endIndex - position }
    var isAtEnd: Bool { remaining == 0 }

    mutating func raw(_ count: Int) throws(HandoverError) -> ArraySlice<UInt8> {
        guard count >= 0, count <= remaining else {
            throw .malformed("a field of \(count) bytes runs past the end (\(remaining) left)")
        }
        defer { position += count }
        return input[position..<(position + count)]
    }

    private mutating func integer<T: FixedWidthInteger>(_: T.Type) throws(HandoverError) -> T {
        var value: T = 0
        for byte in try raw(MemoryLayout<T>.size) { value = value << 8 | T(byte) }
        return value
    }

    mutating func u8() throws(HandoverError) -> UInt8 { try integer(UInt8.self) }
    mutating func u16() throws(HandoverError) -> UInt16 { try integer(UInt16.self) }
    mutating func u32() throws(HandoverError) -> UInt32 { try integer(UInt32.self) }
    mutating func u64() throws(HandoverError) -> UInt64 { try integer(UInt64.self) }

    mutating func flag() throws(HandoverError) -> Bool {
        switch try u8() {
        case 0: return false
        case 1: return true
        case let other: throw .malformed("flag byte \(other) is neither 0 nor 1")
        }
    }

    /// A count of entries each at least `minimumBytesEach` long: more than the bytes left could hold is an error
    /// before anything is allocated for them.
    mutating func count(minimumBytesEach: Int) throws(HandoverError) -> Int {
        let count = Int(try u32())
        guard count <= remaining / minimumBytesEach else {
            throw .malformed("\(count) entries cannot fit in the \(remaining) bytes left")
        }
        return count
    }

    mutating func string() throws(HandoverError) -> String {
        let utf8 = try raw(Int(try u16()))
        guard let string = String(validating: utf8, as: UTF8.self) else { throw .malformed("a string is not UTF-8") }
        return string
    }

    /// A notification name, checked against the grammar.
    mutating func name() throws(HandoverError) -> String {
        let name = try string()
        do {
            try NotificationName.validate(name)
        } catch {
            throw .malformed(error.description)
        }
        return name
    }

    /// A name or pattern, checked against the grammar.
    mutating func pattern() throws(HandoverError) -> String {
        let text = try string()
        do {
            try NotificationPattern.validate(text)
        } catch {
            throw .malformed(error.description)
        }
        return text
    }

    mutating func byteField() throws(HandoverError) -> [UInt8] {
        Array(try raw(Int(try u32())))
    }

    mutating func credentials() throws(HandoverError) -> SenderCredentials {
        SenderCredentials(pid: try u32(), uid: try u32(), gid: try u32())
    }
}
