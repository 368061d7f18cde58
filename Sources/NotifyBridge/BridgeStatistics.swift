import Atomics

/// What a bridge has carried, refused and lost, counted as it happens.
package struct BridgeStatistics: Sendable, Equatable, Codable {
    /// Local notifications published to NATS.
    package var exported: UInt64 = 0
    /// Local notifications too large for the NATS server's `max_payload`.
    package var exportTooLarge: UInt64 = 0
    /// Exports dropped because NATS was unreachable or slow and the outbox was full.
    package var exportDropped: UInt64 = 0
    /// Exports handed to a NATS connection that closed before sending them.
    package var exportLostInFlight: UInt64 = 0
    /// Notifications the daemon dropped before the bridge could take them (its `queue` limit).
    package var exportDroppedByDaemon: UInt64 = 0
    /// NATS messages handed to the local daemon (``importRefused`` of them it refused afterwards).
    package var imported: UInt64 = 0
    /// NATS messages whose origin is this host, not posted again.
    package var importSkippedOwn: UInt64 = 0
    /// Of those, messages from another bridge with the same host id (cloned machines): a configuration error.
    package var importHostIDClash: UInt64 = 0
    /// NATS messages whose origin host header is empty or longer than 255 bytes.
    package var importInvalidOrigin: UInt64 = 0
    /// NATS messages whose subject is not a valid name.
    package var importInvalidName: UInt64 = 0
    /// NATS messages larger than the local daemon's payload limit.
    package var importTooLarge: UInt64 = 0
    /// Imports the local daemon refused (a reserved prefix, another user's `user.` names, a quota).
    package var importRefused: UInt64 = 0
    /// Imports lost because the local daemon was unreachable.
    package var importLost: UInt64 = 0
    /// Messages missing between two that arrived from the same bridge (gaps in `Notifyd-Bridge-Seq`): lost in
    /// NATS (the exporting bridge counts its own drops). Exact when this bridge imports everything the other exports.
    package var importGaps: UInt64 = 0
    /// Whether the NATS connection is up.
    package var natsConnected = false
    /// NATS reconnections so far.
    package var natsReconnects: UInt64 = 0

    package init() {}
}

/// What a bridge posts as its retained status: its host id and counters, flattened into one JSON object.
package struct BridgeStatus: Codable, Equatable {
    package var host: String
    package var statistics: BridgeStatistics

    package init(host: String, statistics: BridgeStatistics) {
        self.host = host
        self.statistics = statistics
    }

    package func encode(to encoder: any Encoder) throws {
        try statistics.encode(to: encoder)
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(host, forKey: .host)
    }

    package init(from decoder: any Decoder) throws {
        statistics = try BridgeStatistics(from: decoder)
        host = try decoder.container(keyedBy: Key.self).decode(String.self, forKey: .host)
    }

    private enum Key: String, CodingKey { case host }
}

/// The counters behind ``BridgeStatistics``, updated from the bridge's two I/O threads without a lock.
final class BridgeCounters: Sendable {
    let exported = ManagedAtomic<UInt64>(0)
    let exportTooLarge = ManagedAtomic<UInt64>(0)
    let exportDroppedByDaemon = ManagedAtomic<UInt64>(0)
    let imported = ManagedAtomic<UInt64>(0)
    let importSkippedOwn = ManagedAtomic<UInt64>(0)
    let importInvalidName = ManagedAtomic<UInt64>(0)
    let importTooLarge = ManagedAtomic<UInt64>(0)
    let importRefused = ManagedAtomic<UInt64>(0)
    let importLost = ManagedAtomic<UInt64>(0)
    let importGaps = ManagedAtomic<UInt64>(0)
    let importInvalidOrigin = ManagedAtomic<UInt64>(0)
    let importHostIDClash = ManagedAtomic<UInt64>(0)
    let exportSequence = ManagedAtomic<UInt64>(0)

    static func bump(_ counter: ManagedAtomic<UInt64>, by amount: UInt64 = 1) {
        counter.wrappingIncrement(by: amount, ordering: .relaxed)
    }
}
