import NIOCore

/// Where a relayed notification was first posted (PROTOCOL.md § 16): the host, the poster's credentials there and
/// the sequence number its daemon gave the post. A relay (notifyd-bridge) sends it with `POST`'s origin flag; the
/// daemon passes it on, after the payload, to connections that asked for origins in `HELLO`.
///
/// What it says is the relay's claim: the kernel-checked sender fields of the notification are the relay's own.
package struct RelayOrigin: Sendable, Hashable {
    /// The origin host's id (1 to 255 bytes of UTF-8).
    package var host: String
    /// The poster's uid on the origin host.
    package var uid: UInt32
    /// The poster's gid on the origin host.
    package var gid: UInt32
    /// The poster's pid on the origin host.
    package var pid: UInt32
    /// The sequence number the origin host's daemon gave the post.
    package var sequence: UInt64

    /// The longest host id, in UTF-8 bytes.
    package static let maxHostLength = 255

    /// Creates an origin.
    package init(host: String, uid: UInt32, gid: UInt32, pid: UInt32, sequence: UInt64) {
        self.host = host
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.sequence = sequence
    }

    /// The field's size on the wire: host (u16 + bytes), uid, gid, pid (u32 each), sequence (u64).
    package var encodedLength: Int { 2 + host.utf8.count + 12 + 8 }

    /// The length (after the length prefix) of the largest frame a relayed post with this origin becomes: its
    /// `NOTIFICATION_MERGED` (merged count, fixed fields, name, payload, origin). The daemon refuses, and the library
    /// does not send, a relayed post for which it exceeds `max_frame_length` (PROTOCOL.md § 16.1).
    package func largestFrameLength(nameByteCount: Int, payloadByteCount: Int) -> Int {
        NotificationFrame.encodedLength(nameByteCount: nameByteCount, payloadByteCount: payloadByteCount)
            - ProtocolConstants.lengthPrefixSize + 8 + encodedLength
    }

    /// Appends the field.
    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeWireString(host)
        buffer.writeInteger(uid)
        buffer.writeInteger(gid)
        buffer.writeInteger(pid)
        buffer.writeInteger(sequence)
    }

    /// Reads the field; a host that is empty or longer than ``maxHostLength`` is a malformed frame.
    package static func decode(_ messageType: MessageType, _ body: inout ByteBuffer) throws(WireDecodingError)
        -> RelayOrigin
    {
        let host = try body.readWireString(messageType, "origin_host")
        guard !host.isEmpty, host.utf8.count <= maxHostLength else {
            throw WireDecodingError.invalidField(
                message: messageType, field: "origin_host", reason: "must be 1 to \(maxHostLength) bytes")
        }
        return RelayOrigin(
            host: host, uid: try body.readWireInteger(messageType, "origin_uid"),
            gid: try body.readWireInteger(messageType, "origin_gid"),
            pid: try body.readWireInteger(messageType, "origin_pid"),
            sequence: try body.readWireInteger(messageType, "origin_sequence"))
    }

    /// Appends the field to the whole frame that ends `buffer` (starting at `frameStart`) and fixes its length.
    package func append(toFrameAt frameStart: Int, in buffer: inout ByteBuffer) {
        encode(into: &buffer)
        buffer.setInteger(UInt32(buffer.writerIndex - frameStart - ProtocolConstants.lengthPrefixSize), at: frameStart)
    }
}
