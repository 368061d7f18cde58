import NIOCore

/// The headers of a NATS message (`HPUB`/`HMSG`): an HTTP-like block after a `NATS/1.0` status line.
///
/// Names keep their case and order; lookups are case-sensitive, as NATS servers and clients treat them.
public struct NATSHeaders: Equatable, Sendable, Sequence {
    /// The header fields in order; a name may repeat.
    public private(set) var fields: [(name: String, value: String)] = []
    /// The status code of the status line (`NATS/1.0 503`), if the server put one there.
    public var status: Int?

    /// Creates an empty header block.
    public init() {}

    /// Creates a header block from name–value pairs.
    public init(_ pairs: [(String, String)]) {
        for (name, value) in pairs { append(name, value) }
    }

    /// Appends a field. Names may not contain `:`, spaces or line breaks and values may not contain line breaks;
    /// such characters are dropped so the block stays well-formed.
    public mutating func append(_ name: String, _ value: String) {
        let cleanName = String(name.unicodeScalars.filter { $0 != ":" && $0 != " " && $0 != "\r" && $0 != "\n" })
        let cleanValue = String(value.unicodeScalars.filter { $0 != "\r" && $0 != "\n" })
        fields.append((cleanName, cleanValue))
    }

    /// The first value of `name`, or nil.
    public subscript(name: String) -> String? {
        fields.first { $0.name == name }?.value
    }

    /// Iterates the fields in order.
    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }

    /// Whether both blocks have the same status and the same fields in the same order.
    public static func == (lhs: NATSHeaders, rhs: NATSHeaders) -> Bool {
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
        guard let text = bytes.getString(at: bytes.readerIndex, length: bytes.readableBytes) else {
            throw .malformedHeaders("not UTF-8")
        }
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)[...]
        guard let statusLine = lines.popFirst(), statusLine.hasPrefix("NATS/1.0") else {
            throw .malformedHeaders("no NATS/1.0 version line")
        }
        var headers = NATSHeaders()
        let rest = statusLine.dropFirst("NATS/1.0".count).drop { $0 == " " }
        if let code = rest.split(separator: " ").first { headers.status = Int(code) }
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw .malformedHeaders("a field without ':'") }
            let name = String(line[..<colon])
            let value = String(line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" })
            headers.fields.append((name, value))
        }
        return headers
    }
}
