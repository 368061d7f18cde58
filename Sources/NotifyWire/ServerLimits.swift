/// Limits a daemon enforces and announces to every client in its `WELCOME` frame.
package struct ServerLimits: Sendable, Hashable {
    /// Longest notification name, in UTF-8 bytes.
    package var maxNameLength: UInt16
    /// Largest notification payload, in bytes.
    package var maxPayloadLength: UInt32
    /// Largest frame, in bytes after the 4-byte length prefix. A longer frame closes the connection.
    package var maxFrameLength: UInt32
    /// Most subscriptions one connection may hold at once.
    package var maxSubscriptions: UInt32

    /// Creates a set of limits.
    package init(maxNameLength: UInt16, maxPayloadLength: UInt32, maxFrameLength: UInt32, maxSubscriptions: UInt32) {
        self.maxNameLength = maxNameLength
        self.maxPayloadLength = maxPayloadLength
        self.maxFrameLength = maxFrameLength
        self.maxSubscriptions = maxSubscriptions
    }

    /// The limits of a daemon started without options: names up to 255 bytes, payloads up to 64 KiB,
    /// frames up to 128 KiB, 65,536 subscriptions per connection.
    package static let `default` = ServerLimits(
        maxNameLength: 255,
        maxPayloadLength: 65_536,
        maxFrameLength: 131_072,
        maxSubscriptions: 65_536
    )

    /// What is wrong with these limits, or an empty list when they are consistent: names of 1 to 255 bytes,
    /// a frame limit of at least ``ProtocolConstants/minimumMaxFrameLength`` that also fits the largest
    /// notification frame (`NOTIFICATION_MERGED`: its type byte, merged count and fixed fields, plus the longest name
    /// and payload).
    package var inconsistencies: [String] {
        var problems: [String] = []
        if maxNameLength == 0 || Int(maxNameLength) > NotificationName.maxLength {
            problems.append("max name length \(maxNameLength) is outside 1...\(NotificationName.maxLength)")
        }
        if maxFrameLength < ProtocolConstants.minimumMaxFrameLength {
            problems.append(
                "max frame length \(maxFrameLength) is below the protocol minimum \(ProtocolConstants.minimumMaxFrameLength)")
        }
        let largestNotification = UInt64(1 + 8 + NotificationFrame.fixedFieldsLength) + UInt64(maxNameLength) + UInt64(maxPayloadLength)
        if UInt64(maxFrameLength) < largestNotification {
            problems.append(
                "max frame length \(maxFrameLength) cannot carry a notification with the longest name and payload (\(largestNotification) bytes)")
        }
        return problems
    }
}
