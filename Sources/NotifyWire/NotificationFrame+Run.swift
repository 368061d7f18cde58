import NIOCore

extension NotificationFrame {
    /// Encodes the `NOTIFICATION` frames of a run of posts by one sender to one name: the fields they share
    /// (sender and name) are encoded once, and each frame is then one reservation and two copies.
    ///
    /// Produces the same bytes as ``NotificationFrame/encode(sequence:sender:name:payload:into:)`` (the golden
    /// vectors check both).
    package struct RunEncoder {
        /// Sender pid, uid and gid, then the name with its length, as encoded. Reused from run to run.
        @usableFromInline var shared: [UInt8] = []

        /// An encoder with no run started (it allocates nothing until it starts one).
        package init() {}

        /// Starts encoding frames for posts by `sender` to `name`.
        package mutating func start(sender: SenderCredentials, name: String) {
            var name = name
            name.withUTF8 { name in
                let length = NotificationFrame.senderAndNameLength(nameByteCount: name.count)
                shared.removeAll(keepingCapacity: true)
                shared.append(contentsOf: repeatElement(0, count: length))
                shared.withUnsafeMutableBytes {
                    NotificationFrame.writeSenderAndName(sender: sender, name: UnsafeRawBufferPointer(name), to: $0)
                }
            }
        }

        /// Whether `nameField` (a name's length and bytes, as `POST` carries them) is this run's name, byte for byte.
        @inlinable
        package func hasName(_ nameField: UnsafeRawBufferPointer) -> Bool {
            guard shared.count >= 14 else { return false }
            return shared.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[12...]).bytesEqual(nameField) }
        }

        /// Appends the whole `NOTIFICATION` frame of one post of the run to `buffer`. Inlinable: it runs once per
        /// post, and inlined it is compiled in the daemon's module, which is built without dynamic exclusivity checks.
        ///
        /// - Returns: the frame's length, prefix included.
        @inlinable @discardableResult
        package func encode(sequence: UInt64, payload: UnsafeRawBufferPointer, into buffer: inout ByteBuffer) -> Int {
            precondition(!shared.isEmpty, "encode before start")
            return shared.withUnsafeBytes { shared in
                NotificationFrame.encode(sequence: sequence, senderAndName: shared, payload: payload, into: &buffer)
            }
        }
    }
}

extension ClientFrame {
    /// The fields of a `POST` read where they lie (after the type byte), without building the name's `String`
    /// or a `ByteBuffer` for the payload: for a daemon that recognises a post continuing a run by comparing
    /// ``nameField`` with the run's name.
    ///
    /// The name's UTF-8 is **not** validated; anything other than that byte-for-byte comparison must decode the
    /// frame with ``ClientFrame/decode(type:body:)``. The pointers are valid only while the bytes are.
    package struct PostFields {
        /// The `flags` byte.
        package var flags: UInt8
        /// The name's length field and bytes, as sent.
        package var nameField: UnsafeRawBufferPointer
        /// The payload's bytes.
        package var payload: UnsafeRawBufferPointer

        /// Reads the fields of a `POST`; `nil` wherever ``ClientFrame/decode(type:body:)`` would throw for the
        /// frame's layout (a field cut short, a payload length that does not match).
        @inlinable
        package init?(fields: UnsafeRawBufferPointer) {
            // request_id u32, flags u8, name (u16 + bytes), payload (u32 + bytes)
            guard let tail = NamePayloadTail.locate(in: fields, nameStart: 4 + 1 + 2) else { return nil }
            flags = fields[4]
            nameField = UnsafeRawBufferPointer(rebasing: fields[(tail.name.lowerBound - 2)..<tail.name.upperBound])
            payload = UnsafeRawBufferPointer(rebasing: fields[tail.payloadStart...])
        }
    }
}
