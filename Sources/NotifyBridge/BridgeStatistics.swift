import Atomics

/// One thing a bridge counts. The case name is the counter's key in the status JSON (snake case there).
package enum BridgeCounter: Int, CaseIterable, Sendable {
    /// Local notifications published to NATS.
    case exported
    /// Local notifications too large for the NATS server's `max_payload`.
    case exportTooLarge
    /// Exports dropped because NATS was unreachable or slow and the outbox was full.
    case exportDropped
    /// Exports handed to a NATS connection that closed before sending them.
    case exportLostInFlight
    /// Notifications the daemon dropped before the bridge could take them (its `queue` limit).
    case exportDroppedByDaemon
    /// NATS messages handed to the local daemon (``importRefused`` of them it refused afterwards).
    case imported
    /// NATS messages whose origin is this host, not posted again.
    case importSkippedOwn
    /// Of those, messages from another bridge with the same host id (cloned machines): a configuration error.
    case importHostIDClash
    /// NATS messages whose origin host header is empty or longer than 255 bytes.
    case importInvalidOrigin
    /// NATS messages whose subject is not a valid name.
    case importInvalidName
    /// NATS messages larger than the local daemon's payload limit.
    case importTooLarge
    /// Imports the local daemon refused (a reserved prefix, another user's `user.` names, a quota).
    case importRefused
    /// Imports lost because the local daemon was unreachable.
    case importLost
    /// Messages missing between two that arrived from the same bridge (gaps in `Notifyd-Bridge-Seq`): lost in
    /// NATS (the exporting bridge counts its own drops). Exact when this bridge imports everything the other exports.
    case importGaps
    /// NATS reconnections so far.
    case natsReconnects
    /// State values put into the key-value bucket (`--kv-bucket`).
    case stateExported
    /// State values from the bucket set locally.
    case stateImported
    /// State values from the bucket that the local daemon refused (a reserved prefix, another user's `user.` name,
    /// a quota).
    case stateRefused
    /// Retained notifications put into the bucket.
    case retainedExported
    /// Retained notifications from the bucket posted locally (``importRefused`` counts the daemon's refusals).
    case retainedImported
    /// Puts the bucket did not take (unreachable, no acknowledgement, refused) or that waited beyond the bound.
    case bucketPutFailed
    /// Bucket entries whose key, value or origin this bridge cannot read.
    case bucketInvalid
    /// Times the bucket's mirror started over: its watch failed, or (a bridge that only exports) its bucket was
    /// found gone.
    case bucketWatchRestarts
    /// Times the bucket was found deleted and created again (its revisions started over): the bridge forgot what it
    /// knew of the old one and put this host's values into the new one.
    case bucketReplaced
    /// Entries the bucket's watch delivered (puts, deletes and purges, of any name), applied or not.
    case bucketEntries

    /// The counter's name: the case name.
    var key: String { "\(self)" }
}

/// What a bridge has carried, refused and lost, counted as it happens.
package struct BridgeStatistics: Sendable, Equatable, Codable {
    private var counts = [UInt64](repeating: 0, count: BridgeCounter.allCases.count)
    /// Whether the NATS connection is up.
    package var natsConnected = false

    package init() {}

    /// The value of one counter.
    package subscript(counter: BridgeCounter) -> UInt64 {
        get { counts[counter.rawValue] }
        set { counts[counter.rawValue] = newValue }
    }

    // Flat JSON, one member per counter, so the status stays readable with jq and by `notifyctl status`.
    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
        static let natsConnected = Key(stringValue: "natsConnected")
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        for counter in BridgeCounter.allCases { try container.encode(self[counter], forKey: Key(stringValue: counter.key)) }
        try container.encode(natsConnected, forKey: .natsConnected)
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        for counter in BridgeCounter.allCases {
            self[counter] = try container.decodeIfPresent(UInt64.self, forKey: Key(stringValue: counter.key)) ?? 0
        }
        natsConnected = try container.decodeIfPresent(Bool.self, forKey: .natsConnected) ?? false
    }
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
    private let values = BridgeCounter.allCases.map { _ in ManagedAtomic<UInt64>(0) }
    /// The last `Notifyd-Bridge-Seq` this bridge published.
    let exportSequence = ManagedAtomic<UInt64>(0)

    func bump(_ counter: BridgeCounter, by amount: UInt64 = 1) {
        values[counter.rawValue].wrappingIncrement(by: amount, ordering: .relaxed)
    }

    /// Every counter as it stands (the NATS client's own counters are filled in by the bridge).
    var snapshot: BridgeStatistics {
        var statistics = BridgeStatistics()
        for counter in BridgeCounter.allCases { statistics[counter] = values[counter.rawValue].load(ordering: .relaxed) }
        return statistics
    }
}
