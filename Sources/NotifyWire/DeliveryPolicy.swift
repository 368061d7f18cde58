/// What the daemon does with a subscription's notifications while its connection cannot take them (it reads
/// too slowly, or it is suspended). `protocol/PROTOCOL.md` § 9.4.
package enum DeliveryPolicy: Sendable, Hashable, CustomStringConvertible {
    /// Keep at most one pending notification per name, the latest, with a count of how many were merged
    /// into it. The default.
    case coalesce
    /// Keep up to `limit` pending notifications in order; past that, drop the oldest and send an `OVERFLOW`
    /// notice with the count before the rest.
    case queue(limit: UInt32)
    /// Close the connection with `ERROR slow-consumer`.
    case disconnect

    /// The `policy` byte.
    package var code: UInt8 {
        switch self {
        case .coalesce: 0
        case .queue: 1
        case .disconnect: 2
        }
    }

    /// The `queue_limit` field (0 unless ``queue(limit:)``).
    package var queueLimit: UInt32 {
        if case .queue(let limit) = self { return limit }
        return 0
    }

    /// Decodes the `policy` and `queue_limit` fields; `nil` when they do not describe a policy.
    package init?(code: UInt8, queueLimit: UInt32) {
        switch code {
        case 0 where queueLimit == 0: self = .coalesce
        case 1 where queueLimit > 0: self = .queue(limit: queueLimit)
        case 2 where queueLimit == 0: self = .disconnect
        default: return nil
        }
    }

    /// How protective a policy is when several subscriptions of one connection match a notification:
    /// `disconnect` wins over `queue` (the larger limit first), which wins over `coalesce`.
    package var strength: UInt64 {
        switch self {
        case .coalesce: 0
        case .queue(let limit): 1 + UInt64(limit)
        case .disconnect: UInt64.max
        }
    }

    /// How this reads in logs and error messages.
    package var description: String {
        switch self {
        case .coalesce: "coalesce"
        case .queue(let limit): "queue(\(limit))"
        case .disconnect: "disconnect"
        }
    }
}

/// What a `QUERY` asks for.
package enum QueryKind: UInt8, Sendable, Hashable, CaseIterable {
    /// Daemon-wide figures.
    case status = 1
    /// Names with subscribers, state or a retained notification, optionally filtered by a pattern.
    case names = 2
    /// Connected clients.
    case clients = 3

    /// Set in `QUERY`'s kind byte by a client that takes a long names or clients answer in parts: zero or
    /// more `QUERY_RESULT_PART` frames, then `QUERY_RESULT`, each a JSON array (`protocol/PROTOCOL.md` § 6.10).
    package static let partsFlag: UInt8 = 0x80
}
