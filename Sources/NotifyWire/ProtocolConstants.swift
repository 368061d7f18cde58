/// Fixed numbers of wire protocol version 1 (see `protocol/PROTOCOL.md`).
@usableFromInline
package enum ProtocolConstants {
    /// The protocol version this implementation speaks.
    package static let version: UInt16 = 1

    /// Size in bytes of the length prefix that starts every frame (unsigned 32-bit, big-endian).
    @usableFromInline
    package static let lengthPrefixSize = 4

    /// The largest frame a peer may send before the handshake has told it the daemon's limit.
    ///
    /// Every daemon accepts frames of at least this many bytes (counted after the length prefix).
    package static let minimumMaxFrameLength: UInt32 = 65_536 + 1_024

    /// The longest client name accepted in `HELLO`, in UTF-8 bytes.
    package static let maxClientNameLength = 255

    /// The request id that means "not tied to any request" in an `ERROR` frame.
    package static let noRequest: UInt32 = 0
}
