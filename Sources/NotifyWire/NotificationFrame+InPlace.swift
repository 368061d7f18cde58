extension NotificationFrame {
    /// The fields of a `NOTIFICATION` read where they lie, without building the name's `String` or a
    /// `ByteBuffer` for the payload.
    ///
    /// For a reader that recognises a run of notifications on a name it has already decoded: it compares
    /// ``name`` with that name's bytes and reuses its `String`. The name's UTF-8 is **not** validated here, so
    /// anything other than such a byte-for-byte comparison must decode the frame with
    /// ``ServerFrame/decode(type:body:)`` instead.
    ///
    /// The pointers are only valid while the bytes passed to ``init(fields:)`` are.
    package struct InPlaceFields {
        /// The daemon-wide sequence number of the post.
        package var sequence: UInt64
        /// The poster's credentials.
        package var sender: SenderCredentials
        /// The name's bytes, not validated.
        package var name: UnsafeRawBufferPointer
        /// The payload's bytes.
        package var payload: UnsafeRawBufferPointer

        /// Reads the fields of a `NOTIFICATION` (the bytes after the type byte).
        ///
        /// Returns `nil` wherever ``ServerFrame/decode(type:body:)`` would throw for the frame's layout: a field
        /// cut short, or bytes after the payload. The caller then decodes the frame in full, which reports the
        /// error precisely.
        @inlinable
        package init?(fields: UnsafeRawBufferPointer) {
            // sequence u64, sender pid/uid/gid u32 ×3, name (u16 + bytes), payload (u32 + bytes)
            guard let tail = NamePayloadTail.locate(in: fields, nameStart: 8 + 12 + 2) else { return nil }
            sequence = fields.loadUnaligned(fromByteOffset: 0, as: UInt64.self).bigEndian
            sender = SenderCredentials(
                pid: fields.loadUnaligned(fromByteOffset: 8, as: UInt32.self).bigEndian,
                uid: fields.loadUnaligned(fromByteOffset: 12, as: UInt32.self).bigEndian,
                gid: fields.loadUnaligned(fromByteOffset: 16, as: UInt32.self).bigEndian)
            name = UnsafeRawBufferPointer(rebasing: fields[tail.name])
            payload = UnsafeRawBufferPointer(rebasing: fields[tail.payloadStart...])
        }
    }
}
