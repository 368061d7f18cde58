import Foundation
import NIOCore

/// Splits what a NATS server sends into operations: a control line ending in `\r\n`, followed for `MSG` and
/// `HMSG` by the payload and its own `\r\n`.
///
/// A message whose payload has not fully arrived leaves every byte in the buffer; its control line is parsed
/// again when more arrive (control lines are short; payloads are read once).
package struct NATSOperationDecoder: ByteToMessageDecoder {
    package typealias InboundOut = NATSServerOperation

    /// The longest control line accepted, as the server's own default `max_control_line`.
    package static let maxControlLine = 4096
    /// The largest message accepted: NATS's own ceiling for `max_payload`. A size above it is refused before a
    /// byte of the message is buffered, so a broken or hostile server cannot make the client buffer without bound.
    package static let maxMessageSize = 64 << 20
    private static let newline = UInt8(ascii: "\n")

    package init() {}

    package mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let operation = try Self.decodeOne(&buffer) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(operation))
        return .continue
    }

    package mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws
        -> DecodingState
    {
        try decode(context: context, buffer: &buffer)
    }

    /// Reads one operation from the front of `buffer`, or returns nil (consuming nothing) when it is incomplete.
    package static func decodeOne(_ buffer: inout ByteBuffer) throws(NATSProtocolError) -> NATSServerOperation? {
        let view = buffer.readableBytesView
        guard let newlineIndex = view.firstIndex(of: newline) else {
            if view.count > maxControlLine { throw .controlLineTooLong(maxControlLine) }
            return nil
        }
        let lineLength = newlineIndex - view.startIndex
        if lineLength > maxControlLine { throw .controlLineTooLong(maxControlLine) }
        var lineEnd = lineLength
        if lineEnd > 0, view[view.startIndex + lineEnd - 1] == UInt8(ascii: "\r") { lineEnd -= 1 }
        guard let line = buffer.getString(at: buffer.readerIndex, length: lineEnd) else {
            throw .malformedOperation("not UTF-8")
        }
        let consumedLine = lineLength + 1
        let fields = line.utf8.split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") })
            .map { Substring($0) }
        guard let first = fields.first else { throw .malformedOperation(line) }
        // Messages are nearly all the traffic: recognise them without building an upper-cased copy.
        let op = first == "MSG" || first == "HMSG" ? String(first) : first.uppercased()
        switch op {
        case "PING":
            buffer.moveReaderIndex(forwardBy: consumedLine)
            return .ping
        case "PONG":
            buffer.moveReaderIndex(forwardBy: consumedLine)
            return .pong
        case "+OK":
            buffer.moveReaderIndex(forwardBy: consumedLine)
            return .ok
        case "-ERR":
            buffer.moveReaderIndex(forwardBy: consumedLine)
            let text = line.dropFirst(4).trimmingCharacters(in: .whitespaces)
            return .error(text.trimmingCharacters(in: CharacterSet(charactersIn: "'")))
        case "INFO":
            buffer.moveReaderIndex(forwardBy: consumedLine)
            let json = line.dropFirst(4).trimmingCharacters(in: .whitespaces)
            do {
                return .info(try JSONDecoder().decode(NATSServerInfo.self, from: Data(json.utf8)))
            } catch {
                throw .malformedInfo("\(error)")
            }
        case "MSG", "HMSG":
            return try decodeMessage(&buffer, fields: fields, line: line, hasHeaders: op == "HMSG", lineBytes: consumedLine)
        default:
            throw .unknownOperation(String(op.prefix(16)))
        }
    }

    /// `MSG subject sid [reply] size` or `HMSG subject sid [reply] headerSize totalSize`, then the bytes.
    private static func decodeMessage(
        _ buffer: inout ByteBuffer, fields: [Substring], line: String, hasHeaders: Bool, lineBytes: Int
    ) throws(NATSProtocolError) -> NATSServerOperation? {
        let sizes = hasHeaders ? 2 : 1
        guard fields.count == 3 + sizes || fields.count == 4 + sizes else { throw .malformedOperation(line) }
        let hasReply = fields.count == 4 + sizes
        guard let sid = UInt64(fields[2]), let total = Int(fields[fields.count - 1]), total >= 0 else {
            throw .malformedOperation(line)
        }
        guard total <= maxMessageSize else { throw .messageTooLarge(total, limit: maxMessageSize) }
        var headerSize = 0
        if hasHeaders {
            guard let size = Int(fields[fields.count - 2]), size >= 0, size <= total else {
                throw .malformedOperation(line)
            }
            headerSize = size
        }
        guard buffer.readableBytes >= lineBytes + total + 2 else { return nil }
        let bodyStart = buffer.readerIndex + lineBytes
        guard buffer.getInteger(at: bodyStart + total, as: UInt16.self) == 0x0D0A else {
            throw .missingPayloadTerminator(String(fields[1]))
        }
        var headers: NATSHeaders?
        if hasHeaders, let block = buffer.getSlice(at: bodyStart, length: headerSize) {
            headers = try NATSHeaders.parse(block)
        }
        let payload = buffer.getSlice(at: bodyStart + headerSize, length: total - headerSize) ?? ByteBuffer()
        buffer.moveReaderIndex(forwardBy: lineBytes + total + 2)
        return .message(
            NATSMessage(
                subject: String(fields[1]), sid: sid, replyTo: hasReply ? String(fields[3]) : nil, headers: headers,
                payload: payload
            )
        )
    }
}
