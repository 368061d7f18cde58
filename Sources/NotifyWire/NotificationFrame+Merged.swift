import NIOCore

extension NotificationFrame {
    /// Writes an encoded `NOTIFICATION` frame (length prefix included) as `NOTIFICATION_MERGED`: the same
    /// fields after a `merged_count`, without decoding them.
    ///
    /// The daemon keeps a coalesced notification as the bytes of its latest post and learns how many it
    /// absorbed only when it releases it.
    package static func writeMerged(_ notification: ByteBuffer, mergedCount: UInt64, into buffer: inout ByteBuffer) {
        let headerLength = ProtocolConstants.lengthPrefixSize + 1
        let fields = notification.getSlice(
            at: notification.readerIndex + headerLength, length: notification.readableBytes - headerLength)!
        buffer.writeInteger(UInt32(1 + 8 + fields.readableBytes))
        buffer.writeInteger(MessageType.notificationMerged.rawValue)
        buffer.writeInteger(mergedCount)
        buffer.writeImmutableBuffer(fields)
    }
}
