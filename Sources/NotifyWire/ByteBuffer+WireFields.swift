import NIOCore

/// Field-level reading and writing shared by every frame type.
///
/// Integers are big-endian. A string is a `u16` byte count followed by that many bytes of UTF-8;
/// a byte payload is a `u32` byte count followed by that many bytes.
extension ByteBuffer {
    @inlinable
    mutating func readWireInteger<T: FixedWidthInteger>(
        as: T.Type = T.self, _ message: MessageType, _ field: String
    ) throws(WireDecodingError) -> T {
        guard let value = readInteger(endianness: .big, as: T.self) else {
            throw WireDecodingError.truncatedField(message: message, field: field)
        }
        return value
    }

    mutating func readWireString(_ message: MessageType, _ field: String) throws(WireDecodingError) -> String {
        let length: UInt16 = try readWireInteger(message, field)
        guard readableBytes >= Int(length) else {
            throw WireDecodingError.truncatedField(message: message, field: field)
        }
        let decoded = withUnsafeReadableBytes { raw in
            let bytes = UnsafeRawBufferPointer(rebasing: raw.prefix(Int(length)))
            // Names are nearly always ASCII, which is valid UTF-8 as it stands: skip the general validator
            // (it goes through unspecialized generic code; Benchmarks/BENCHMARKS.md has the profile).
            return bytes.isASCII
                ? bytes.withMemoryRebound(to: UInt8.self) { String(decoding: $0, as: UTF8.self) }
                : String(validating: bytes, as: UTF8.self)
        }
        guard let string = decoded else {
            throw WireDecodingError.invalidUTF8(message: message, field: field)
        }
        moveReaderIndex(forwardBy: Int(length))
        return string
    }

    mutating func readWirePayload(_ message: MessageType, _ field: String) throws(WireDecodingError) -> ByteBuffer {
        let length: UInt32 = try readWireInteger(message, field)
        guard let slice = readSlice(length: Int(length)) else {
            throw WireDecodingError.truncatedField(message: message, field: field)
        }
        return slice
    }

    /// Writes a `u16`-prefixed UTF-8 string. Callers guarantee the string fits in 65,535 bytes.
    @discardableResult
    mutating func writeWireString(_ string: String) -> Int {
        let count = string.utf8.count
        precondition(count <= Int(UInt16.max), "wire strings are limited to 65,535 bytes")
        writeInteger(UInt16(count), endianness: .big)
        return 2 + writeString(string)
    }

    /// Writes a `u32`-prefixed byte payload.
    @discardableResult
    mutating func writeWirePayload(_ payload: ByteBuffer) -> Int {
        writeInteger(UInt32(payload.readableBytes), endianness: .big)
        return 4 + writeImmutableBuffer(payload)
    }

    /// Writes a frame: reserves the length prefix, lets `body` write the type byte and fields, then fills in
    /// the length.
    @inlinable
    mutating func writeWireFrame(_ type: MessageType, _ body: (inout ByteBuffer) -> Void) {
        let lengthIndex = writerIndex
        writeInteger(UInt32(0))
        writeInteger(type.rawValue)
        body(&self)
        let length = writerIndex - lengthIndex - ProtocolConstants.lengthPrefixSize
        setInteger(UInt32(length), at: lengthIndex, endianness: .big)
    }

    func ensureFullyRead(_ message: MessageType) throws(WireDecodingError) {
        if readableBytes > 0 { throw WireDecodingError.trailingBytes(message: message, count: readableBytes) }
    }
}

extension UnsafeRawBufferPointer {
    /// Whether every byte is below 0x80; eight bytes at a time.
    var isASCII: Bool {
        var index = 0
        var highBits: UInt64 = 0
        while index + 8 <= count {
            highBits |= loadUnaligned(fromByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < count {
            highBits |= UInt64(self[index])
            index += 1
        }
        return highBits & 0x8080_8080_8080_8080 == 0
    }
}

extension String {
    /// The string cut to at most `maxBytes` of UTF-8 without splitting a character.
    package func truncatedUTF8(maxBytes: Int) -> String {
        if utf8.count <= maxBytes { return self }
        var result = ""
        var used = 0
        for character in self {
            let width = character.utf8.count
            if used + width > maxBytes { break }
            result.append(character)
            used += width
        }
        return result
    }
}
