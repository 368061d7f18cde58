/// The tail that `POST` and `NOTIFICATION` share: a name (u16 length + bytes) followed by a payload (u32 length +
/// bytes) that ends the frame. The in-place readers of both frames locate it here.
///
/// Public (its member is package) so that `locate` inlines into the daemon: Swift 6.3 does not inline an
/// `@inlinable` member of a `package` type into another module.
public enum NamePayloadTail {
    /// Where the name's bytes and the payload's bytes are in `fields`, when the name's length field sits just
    /// before `nameStart`; `nil` wherever a full decode would throw for the layout (a field cut short, a payload
    /// length that does not match the bytes left).
    @inlinable @inline(__always)
    package static func locate(
        in fields: UnsafeRawBufferPointer, nameStart: Int
    ) -> (name: Range<Int>, payloadStart: Int)? {
        guard fields.count >= nameStart else { return nil }
        let nameLength = Int(fields[nameStart - 2]) << 8 | Int(fields[nameStart - 1])
        let payloadStart = nameStart + nameLength + 4
        guard fields.count >= payloadStart else { return nil }
        let declared = fields.loadUnaligned(fromByteOffset: payloadStart - 4, as: UInt32.self).bigEndian
        guard UInt64(declared) == UInt64(fields.count - payloadStart) else { return nil }
        return (nameStart..<(nameStart + nameLength), payloadStart)
    }
}
