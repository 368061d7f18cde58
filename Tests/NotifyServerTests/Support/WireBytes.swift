import NIOCore
import NotifyWire

/// Builders for raw (possibly invalid) bytes on the wire.
enum WireBytes {
    static func u16(_ value: UInt16) -> [UInt8] { [UInt8(value >> 8), UInt8(value & 0xFF)] }

    static func u32(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }

    /// A `string` field: `u16` byte count, then the bytes as given (not checked for UTF-8).
    static func string(_ bytes: [UInt8]) -> [UInt8] { u16(UInt16(bytes.count)) + bytes }

    static func string(_ text: String) -> [UInt8] { string(Array(text.utf8)) }

    /// A frame whose length prefix matches `type` plus `body`.
    static func frame(type: UInt8, _ body: [UInt8]) -> [UInt8] {
        u32(UInt32(1 + body.count)) + [type] + body
    }

    /// The encoding of well-formed client frames.
    static func encode(_ frames: ClientFrame...) -> [UInt8] {
        var buffer = ByteBuffer()
        for frame in frames { frame.encode(into: &buffer) }
        return Array(buffer.readableBytesView)
    }

    static func hello(version: UInt16 = ProtocolConstants.version, name: String = "raw") -> [UInt8] {
        encode(.hello(ClientFrame.Hello(version: version, clientName: name)))
    }
}

/// A payload carrying a counter in its first 4 bytes (big-endian), padded to `size` bytes.
func counterPayload(_ counter: UInt32, size: Int = 4) -> ByteBuffer {
    var buffer = ByteBuffer()
    buffer.reserveCapacity(max(size, 4))
    buffer.writeInteger(counter, endianness: .big)
    if size > 4 { buffer.writeRepeatingByte(UInt8(truncatingIfNeeded: counter), count: size - 4) }
    return buffer
}

/// The counter at the start of a ``counterPayload(_:size:)`` payload.
func counter(of payload: ByteBuffer) -> UInt32? {
    payload.getInteger(at: payload.readerIndex, endianness: .big, as: UInt32.self)
}

extension WireBytes {
    /// The fixed fields of a `SUBSCRIBE` body, before its `pattern` string: `request_id`, `subscription_id`,
    /// `flags`, `policy` and `queue_limit` (kept here with ``ClientFrame/testSubscribe(requestID:subscriptionID:name:policy:flags:)``,
    /// so that a change of the frame's fields touches only this file).
    static func subscribeFields(
        requestID: UInt32, subscriptionID: UInt32, flags: UInt8 = 0, policy: UInt8 = 0, queueLimit: UInt32 = 0
    ) -> [UInt8] {
        u32(requestID) + u32(subscriptionID) + [flags, policy] + u32(queueLimit)
    }
}
