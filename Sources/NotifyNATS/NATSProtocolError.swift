/// What is wrong with bytes a NATS server sent. The connection is closed and reopened after any of them.
package enum NATSProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A control line longer than the limit without a line end.
    case controlLineTooLong(Int)
    /// An operation the client does not know.
    case unknownOperation(String)
    /// An operation whose arguments are missing or unreadable.
    case malformedOperation(String)
    /// A message whose payload is not followed by `\r\n`.
    case missingPayloadTerminator(String)
    /// A header block that is not `NATS/1.0` followed by `Name: value` lines.
    case malformedHeaders(String)
    /// An `INFO` whose JSON does not decode.
    case malformedInfo(String)
    /// A message announced larger than any NATS server sends.
    case messageTooLarge(Int, limit: Int)

    /// One line for logs.
    package var description: String {
        switch self {
        case .controlLineTooLong(let limit): "a control line longer than \(limit) bytes"
        case .unknownOperation(let op): "unknown operation '\(op)'"
        case .malformedOperation(let line): "malformed operation '\(line)'"
        case .missingPayloadTerminator(let subject): "a message on '\(subject)' without CRLF after its payload"
        case .malformedHeaders(let why): "malformed headers: \(why)"
        case .malformedInfo(let why): "malformed INFO: \(why)"
        case .messageTooLarge(let size, let limit): "a message of \(size) bytes (the most a server sends is \(limit))"
        }
    }
}
