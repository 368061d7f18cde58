import NIOCore

/// The fields of a `POST` frame read in place, without decoding the name into a `String`.
///
/// A poster usually sends many posts to one name in a row. The daemon decodes and checks the first in full
/// and recognises the rest of the run by comparing name bytes; anything this view cannot read goes through
/// ``ClientFrame/decode(type:body:)``, which reports the precise error.
public struct PostFrameView {
    /// The request id chosen by the client.
    public let requestID: UInt32
    /// The raw `flags` byte.
    public let flags: UInt8
    /// The name's UTF-8 bytes (unvalidated).
    public let name: ByteBuffer
    /// The payload bytes.
    public let payload: ByteBuffer

    /// Reads the fields of a `POST` body (the bytes after the type byte); `nil` if they do not fit the layout
    /// exactly.
    @inlinable
    public init?(body: ByteBuffer) {
        var body = body
        guard let requestID = body.readInteger(endianness: .big, as: UInt32.self),
            let flags = body.readInteger(as: UInt8.self),
            let nameLength = body.readInteger(endianness: .big, as: UInt16.self),
            let name = body.readSlice(length: Int(nameLength)),
            let payloadLength = body.readInteger(endianness: .big, as: UInt32.self),
            let payload = body.readSlice(length: Int(payloadLength)),
            body.readableBytes == 0
        else { return nil }
        self.requestID = requestID
        self.flags = flags
        self.name = name
        self.payload = payload
    }

    /// Whether the name is byte for byte `other` (see ``ExactName``).
    @inlinable
    public func nameEquals(_ other: String) -> Bool {
        var other = other
        return other.withUTF8 { otherBytes in
            name.withUnsafeReadableBytes { $0.bytesEqual(UnsafeRawBufferPointer(otherBytes)) }
        }
    }
}
