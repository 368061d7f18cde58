import NIOCore

/// The fields of `STATE_CHANGED` (PROTOCOL.md § 7.14): a state value of a name a `SUBSCRIBE` with the states flag
/// watches, either a change just made or (``isCurrent``) a current value sent before that `SUBSCRIBE`'s `OK`.
package struct StateChangedFrame: Sendable, Hashable {
    /// The `SUBSCRIBE`'s request id for a current value; 0 for a change.
    package var requestID: UInt32
    /// The `flags` byte as received; see ``isCurrent``.
    package var flags: UInt8
    /// The state value.
    package var value: UInt64
    /// The setter's credentials (`SO_PEERCRED`); all 0 for a current value.
    package var sender: SenderCredentials
    /// The name whose value it is.
    package var name: String

    /// Bit 0 of `flags`: a value sent before the `SUBSCRIBE`'s `OK`, not a change.
    package static let currentFlag: UInt8 = 0x01

    /// Creates the fields of a change (`isCurrent` false) or of a current value.
    package init(requestID: UInt32, isCurrent: Bool, value: UInt64, sender: SenderCredentials, name: String) {
        self.init(requestID: requestID, flags: isCurrent ? Self.currentFlag : 0, value: value, sender: sender, name: name)
    }

    /// Creates the fields from a raw `flags` byte (reserved bits kept, for decoding).
    package init(requestID: UInt32, flags: UInt8, value: UInt64, sender: SenderCredentials, name: String) {
        self.requestID = requestID
        self.flags = flags
        self.value = value
        self.sender = sender
        self.name = name
    }

    /// Whether this is a current value sent before the `SUBSCRIBE`'s `OK` rather than a change.
    package var isCurrent: Bool { flags & Self.currentFlag != 0 }

    /// The exact number of bytes the frame takes on the wire, length prefix included.
    package static func encodedLength(nameByteCount: Int) -> Int {
        ProtocolConstants.lengthPrefixSize + 1 + 4 + 1 + 8 + 12 + 2 + nameByteCount
    }

    func encodeFields(into buffer: inout ByteBuffer) {
        buffer.writeInteger(requestID)
        buffer.writeInteger(flags)
        buffer.writeInteger(value)
        buffer.writeInteger(sender.pid)
        buffer.writeInteger(sender.uid)
        buffer.writeInteger(sender.gid)
        buffer.writeWireString(name)
    }

    static func decodeFields(_ messageType: MessageType, _ body: inout ByteBuffer) throws(WireDecodingError) -> Self {
        let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
        let flags: UInt8 = try body.readWireInteger(messageType, "flags")
        let value: UInt64 = try body.readWireInteger(messageType, "value")
        let pid: UInt32 = try body.readWireInteger(messageType, "sender_pid")
        let uid: UInt32 = try body.readWireInteger(messageType, "sender_uid")
        let gid: UInt32 = try body.readWireInteger(messageType, "sender_gid")
        let name = try body.readWireString(messageType, "name")
        return StateChangedFrame(
            requestID: requestID, flags: flags, value: value, sender: SenderCredentials(pid: pid, uid: uid, gid: gid),
            name: name)
    }
}
