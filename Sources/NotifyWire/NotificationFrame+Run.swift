import NIOCore

extension NotificationFrame {
    /// See ``NotificationRunEncoder`` (declared at the top level, public with package members: Swift 6.3 does not
    /// inline an `@inlinable` member of a `package` type into another module, and this one runs once per post).
    package typealias RunEncoder = NotificationRunEncoder
}

/// Encodes the `NOTIFICATION` frames of a run of posts by one sender to one name: the fields they share
/// (sender and name) are encoded once, and each frame is then one reservation and two copies.
///
/// Produces the same bytes as ``NotificationFrame/encode(sequence:sender:name:payload:into:)`` (the golden
/// vectors check both).
public struct NotificationRunEncoder {
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
    @inlinable @inline(__always)
    package func hasName(_ nameField: UnsafeRawBufferPointer) -> Bool {
        guard shared.count >= 14 else { return false }
        return shared.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[12...]).bytesEqual(nameField) }
    }

    /// Appends the whole `NOTIFICATION` frame of one post of the run to `buffer`. Inlinable: it runs once per
    /// post, and inlined it is compiled in the daemon's module, which is built without dynamic exclusivity checks.
    ///
    /// - Returns: the frame's length, prefix included.
    @inlinable @inline(__always) @discardableResult
    package func encode(sequence: UInt64, payload: UnsafeRawBufferPointer, into buffer: inout ByteBuffer) -> Int {
        precondition(!shared.isEmpty, "encode before start")
        return shared.withUnsafeBytes { shared in
            Self.encodeFrame(sequence: sequence, senderAndName: shared, payload: payload, into: &buffer)
        }
    }

    /// The frame writer behind ``NotificationFrame/encode(sequence:senderAndName:payload:into:)``, here so that it
    /// inlines into the daemon (see the type's note). Always inlined: it runs once per post.
    @inlinable @inline(__always) @discardableResult
    package static func encodeFrame(
        sequence: UInt64, senderAndName shared: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer,
        into buffer: inout ByteBuffer
    ) -> Int {
        writeFrame(sequence: sequence, senderAndNameLength: shared.count, payload: payload, into: &buffer) {
            $0.copyMemory(from: shared)
        }
    }

    /// Appends the whole `NOTIFICATION` frame of one post by the sender `pid`, `uid`, `gid` whose name field (the
    /// name's length and bytes, as `POST` carries them) is `nameField`: for a post with one recipient, encoded
    /// straight into its queue with no run. Same bytes as a run's frame (`RunEncodingTests`).
    ///
    /// - Returns: the frame's length, prefix included.
    @inlinable @inline(__always) @discardableResult
    package static func encodeFrame(
        sequence: UInt64, pid: UInt32, uid: UInt32, gid: UInt32, nameField: UnsafeRawBufferPointer,
        payload: UnsafeRawBufferPointer, into buffer: inout ByteBuffer
    ) -> Int {
        writeFrame(sequence: sequence, senderAndNameLength: 12 + nameField.count, payload: payload, into: &buffer) {
            $0.storeBytes(of: pid.bigEndian, toByteOffset: 0, as: UInt32.self)
            $0.storeBytes(of: uid.bigEndian, toByteOffset: 4, as: UInt32.self)
            $0.storeBytes(of: gid.bigEndian, toByteOffset: 8, as: UInt32.self)
            UnsafeMutableRawBufferPointer(rebasing: $0[12...]).copyMemory(from: nameField)
        }
    }

    /// Appends a `NOTIFICATION` frame whose sender and name fields, `senderAndNameLength` bytes, `writeSenderAndName`
    /// writes: the length prefix, type and sequence before them, the payload after.
    @inlinable @inline(__always)
    package static func writeFrame(
        sequence: UInt64, senderAndNameLength: Int, payload: UnsafeRawBufferPointer, into buffer: inout ByteBuffer,
        _ writeSenderAndName: (UnsafeMutableRawBufferPointer) -> Void
    ) -> Int {
        let bodyLength = 1 + 8 + senderAndNameLength + 4 + payload.count
        let total = Self.lengthPrefixSize + bodyLength
        // Reserve only when short of room (a compare, not a call per post), and write through the whole storage at
        // the writer index: `writeWithUnsafeMutableBytes` calls NIO's out-of-line `reserveCapacity` and slices
        // the storage with a generic `dropFirst` on every frame.
        if buffer.writableBytes < total { buffer.reserveCapacity(minimumWritableBytes: total) }
        let start = buffer.writerIndex
        buffer.withVeryUnsafeMutableBytes { storage in
            let out = UnsafeMutableRawBufferPointer(rebasing: storage[start..<(start + total)])
            out.storeBytes(of: UInt32(bodyLength).bigEndian, toByteOffset: 0, as: UInt32.self)
            out[4] = Self.notificationType
            out.storeBytes(of: sequence.bigEndian, toByteOffset: 5, as: UInt64.self)
            var position = 13
            writeSenderAndName(UnsafeMutableRawBufferPointer(rebasing: out[position..<(position + senderAndNameLength)]))
            position += senderAndNameLength
            out.storeBytes(of: UInt32(payload.count).bigEndian, toByteOffset: position, as: UInt32.self)
            position += 4
            if payload.count > 0 {
                UnsafeMutableRawBufferPointer(rebasing: out[position..<(position + payload.count)]).copyMemory(from: payload)
            }
        }
        buffer.moveWriterIndex(forwardBy: total)
        return total
    }

    /// ``ProtocolConstants/lengthPrefixSize`` and ``MessageType/notification``, as literals the inlined writer
    /// can use without a call (`RunEncodingTests` checks they match).
    @inlinable package static var lengthPrefixSize: Int { 4 }
    @inlinable package static var notificationType: UInt8 { 0x85 }
}

extension ClientFrame {
    /// See ``ClientPostFields`` (top level and public for the reason given at ``NotificationRunEncoder``).
    package typealias PostFields = ClientPostFields
}

/// The fields of a `POST` read where they lie (after the type byte), without building the name's `String`
/// or a `ByteBuffer` for the payload: for a daemon that recognises a post continuing a run by comparing
/// ``nameField`` with the run's name.
///
/// The name's UTF-8 is **not** validated; anything other than that byte-for-byte comparison must decode the
/// frame with ``ClientFrame/decode(type:body:)``. The pointers are valid only while the bytes are.
public struct ClientPostFields {
    /// The `flags` byte.
    @usableFromInline package var flags: UInt8
    /// The name's length field and bytes, as sent.
    @usableFromInline package var nameField: UnsafeRawBufferPointer
    /// The payload's bytes.
    @usableFromInline package var payload: UnsafeRawBufferPointer

    /// Reads the fields of a `POST`; `nil` wherever ``ClientFrame/decode(type:body:)`` would throw for the
    /// frame's layout (a field cut short, a payload length that does not match).
    @inlinable @inline(__always)
    package init?(fields: UnsafeRawBufferPointer) {
        // request_id u32, flags u8, name (u16 + bytes), payload (u32 + bytes)
        guard let tail = NamePayloadTail.locate(in: fields, nameStart: 4 + 1 + 2) else { return nil }
        flags = fields[4]
        nameField = UnsafeRawBufferPointer(rebasing: fields[(tail.name.lowerBound - 2)..<tail.name.upperBound])
        payload = UnsafeRawBufferPointer(rebasing: fields[tail.payloadStart...])
    }
}
