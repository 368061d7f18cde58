import NIOCore

/// A frame type that can be decoded from the bytes after a length prefix.
package protocol WireFrameDecodable: Sendable {
    /// Decodes a frame whose type byte is `type` and whose fields are all of `body`.
    ///
    /// - Throws: ``WireDecodingError`` if `type` is not accepted or the fields do not match it.
    static func decode(type: UInt8, body: inout ByteBuffer) throws(WireDecodingError) -> Self
}

/// A frame type that can be written to the wire, length prefix included.
package protocol WireFrameEncodable: Sendable {
    /// Appends the whole frame (length prefix, type byte, fields) to `buffer`.
    func encode(into buffer: inout ByteBuffer)
}

extension WireFrameEncodable {
    /// The encoded frame in a buffer of its own.
    package func encoded(allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: 64)
        encode(into: &buffer)
        return buffer
    }
}

extension WireFrameDecodable {
    /// Decodes one whole frame (length prefix included) from the front of `buffer`.
    ///
    /// - Returns: the frame, or `nil` when `buffer` does not yet hold a whole frame (nothing is consumed).
    /// - Throws: ``WireDecodingError`` when the length prefix is out of range or the frame is malformed.
    package static func decodeFrame(
        from buffer: inout ByteBuffer, maxFrameLength: UInt32
    ) throws(WireDecodingError) -> Self? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, endianness: .big, as: UInt32.self) else {
            return nil
        }
        if length == 0 { throw WireDecodingError.emptyFrame }
        if length > maxFrameLength { throw WireDecodingError.frameTooLarge(length: length, limit: maxFrameLength) }
        guard buffer.readableBytes >= ProtocolConstants.lengthPrefixSize + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: ProtocolConstants.lengthPrefixSize)
        var body = buffer.readSlice(length: Int(length))!
        let type: UInt8 = body.readInteger()!
        return try decode(type: type, body: &body)
    }
}

extension ByteBuffer {
    /// The whole length (prefix included) of the encoded frame that starts `offset` bytes after the reader
    /// index, for walking a buffer of frames this process encoded itself (no checks: the frames are well formed).
    @inlinable
    package func wireFrameLength(atOffset offset: Int) -> Int {
        ProtocolConstants.lengthPrefixSize + Int(getInteger(at: readerIndex + offset, endianness: .big, as: UInt32.self)!)
    }
}

/// Walks a run of encoded frames by their length prefixes.
package enum WireFrame {
    /// How many whole frames `bytes` holds (frames a daemon encoded itself, such as those it held for a client;
    /// a cut-off last frame is not counted).
    package static func count(in bytes: [UInt8]) -> Int {
        var count = 0
        var offset = 0
        while offset + ProtocolConstants.lengthPrefixSize <= bytes.count {
            let length = bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) }
            offset += ProtocolConstants.lengthPrefixSize + length
            if offset <= bytes.count { count += 1 }
        }
        return count
    }
}
