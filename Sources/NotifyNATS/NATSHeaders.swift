import NIOCore

/// The headers of a NATS message (`HPUB`/`HMSG`): an HTTP-like block after a `NATS/1.0` status line.
///
/// Names keep their case and order; lookups are case-sensitive, as NATS servers and clients treat them.
package struct NATSHeaders: Equatable, Sendable, Sequence {
    /// The header fields in order; a name may repeat.
    package private(set) var fields: [(name: String, value: String)] = []
    /// The status code of the status line (`NATS/1.0 503`), if the server put one there.
    package var status: Int?

    /// Creates an empty header block.
    package init() {}

    /// Creates a header block from name–value pairs.
    package init(_ pairs: [(String, String)]) {
        for (name, value) in pairs { append(name, value) }
    }

    /// Appends a field. Names may not contain `:`, spaces or line breaks and values may not contain line breaks;
    /// such characters are dropped so the block stays well-formed.
    package mutating func append(_ name: String, _ value: String) {
        let nameIsClean = !name.utf8.contains { $0 == UInt8(ascii: ":") || $0 == 0x20 || $0 == 0x0D || $0 == 0x0A }
        let valueIsClean = !value.utf8.contains { $0 == 0x0D || $0 == 0x0A }
        if nameIsClean && valueIsClean {
            fields.append((name, value))
            return
        }
        let cleanName = String(name.unicodeScalars.filter { $0 != ":" && $0 != " " && $0 != "\r" && $0 != "\n" })
        let cleanValue = String(value.unicodeScalars.filter { $0 != "\r" && $0 != "\n" })
        fields.append((cleanName, cleanValue))
    }

    /// The first value of `name`, or nil.
    package subscript(name: String) -> String? {
        fields.first { $0.name == name }?.value
    }

    /// Iterates the fields in order.
    package func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }

    /// Whether both blocks have the same status and the same fields in the same order.
    package static func == (lhs: NATSHeaders, rhs: NATSHeaders) -> Bool {
        lhs.status == rhs.status && lhs.fields.elementsEqual(rhs.fields) { $0.name == $1.name && $0.value == $1.value }
    }

    /// Writes the block as it travels: `NATS/1.0\r\n`, one `Name: value\r\n` per field, and a blank line.
    package func write(to buffer: inout ByteBuffer) -> Int {
        var written = buffer.writeString("NATS/1.0\r\n")
        for field in fields {
            written += buffer.writeString(field.name)
            written += buffer.writeString(": ")
            written += buffer.writeString(field.value)
            written += buffer.writeString("\r\n")
        }
        written += buffer.writeString("\r\n")
        return written
    }

    /// Parses a block as it travels.
    ///
    /// - Throws: ``NATSProtocolError/malformedHeaders(_:)`` when the version line or a field is unreadable.
    package static func parse(_ bytes: ByteBuffer) throws(NATSProtocolError) -> NATSHeaders {
        // Byte by byte: splitting a String at "\r\n" walks grapheme clusters, several times slower.
        var headers = NATSHeaders()
        var isFirstLine = true
        let view = bytes.readableBytesView
        var start = view.startIndex
        while start < view.endIndex {
            var end = view[start...].firstIndex(of: UInt8(ascii: "\n")) ?? view.endIndex
            let next = end == view.endIndex ? end : end + 1
            if end > start, view[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            let line = view[start..<end]
            start = next
            guard let text = String(validating: line, as: UTF8.self) else { throw .malformedHeaders("not UTF-8") }
            if isFirstLine {
                isFirstLine = false
                guard text.hasPrefix("NATS/1.0") else { throw .malformedHeaders("no NATS/1.0 version line") }
                let rest = text.utf8.dropFirst(8).drop { $0 == UInt8(ascii: " ") }
                if let code = rest.split(separator: UInt8(ascii: " ")).first { headers.status = Int(Substring(code)) }
                continue
            }
            if text.isEmpty { continue }
            guard let colon = text.utf8.firstIndex(of: UInt8(ascii: ":")) else {
                throw .malformedHeaders("a field without ':'")
            }
            let name = String(text[..<colon])
            let value = String(text[text.index(after: colon)...].drop { $0 == " " || $0 == "\t" })
            headers.fields.append((name, value))
        }
        if isFirstLine { throw .malformedHeaders("no NATS/1.0 version line") }
        return headers
    }
}
