/// Why bytes received from a peer could not be turned into a frame.
@usableFromInline
package enum WireDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The length prefix announced a frame larger than the receiver accepts.
    case frameTooLarge(length: UInt32, limit: UInt32)
    /// The length prefix announced a frame of zero bytes (no room for a message type).
    case emptyFrame
    /// The type byte names no message the receiver accepts.
    case unknownMessageType(UInt8)
    /// A field ran past the end of its frame.
    case truncatedField(message: MessageType, field: String)
    /// A string field is not valid UTF-8.
    case invalidUTF8(message: MessageType, field: String)
    /// The frame has bytes left over after its last field.
    case trailingBytes(message: MessageType, count: Int)
    /// The connection ended with part of a frame still unread.
    case truncatedFrame(bufferedBytes: Int)
    /// A field's value is outside what its definition allows (an empty origin host, say).
    case invalidField(message: MessageType, field: String, reason: String)

    /// The protocol error code a daemon answers this with.
    package var code: ErrorCode {
        switch self {
        case .frameTooLarge, .emptyFrame: .frameTooLarge
        case .unknownMessageType: .unknownMessageType
        case .truncatedField, .invalidUTF8, .trailingBytes, .truncatedFrame, .invalidField: .malformedFrame
        }
    }

    /// How this reads in logs and error messages.
    @usableFromInline
    package var description: String {
        switch self {
        case .frameTooLarge(let length, let limit):
            "frame length \(length) exceeds the limit of \(limit) bytes"
        case .emptyFrame:
            "frame length 0 leaves no room for a message type"
        case .unknownMessageType(let type):
            "unknown message type 0x\(String(type, radix: 16, uppercase: true))"
        case .truncatedField(let message, let field):
            "\(message) frame ends inside field '\(field)'"
        case .invalidUTF8(let message, let field):
            "\(message) field '\(field)' is not valid UTF-8"
        case .trailingBytes(let message, let count):
            "\(message) frame has \(count) unexpected trailing byte(s)"
        case .invalidField(let message, let field, let reason):
            "\(message) field '\(field)': \(reason)"
        case .truncatedFrame(let buffered):
            "connection ended in the middle of a frame (\(buffered) byte(s) of it received)"
        }
    }
}
