import Foundation
import NIOCore

/// What a client writes to a NATS server. Each writes one whole operation to a buffer.
package enum NATSClientOperation {
    /// `CONNECT {json}`: the client's options and credentials, sent once after the server's `INFO`.
    package struct ConnectOptions: Encodable {
        var verbose = false
        var pedantic = false
        var tlsRequired = false
        var name: String
        var lang = "swift"
        var version = "0.1"
        var `protocol` = 1
        var echo: Bool
        var headers = true
        var noResponders = true
        var user: String?
        var pass: String?
        var authToken: String?

        enum CodingKeys: String, CodingKey {
            case verbose, pedantic, name, lang, version, `protocol`, echo, headers, user, pass
            case tlsRequired = "tls_required"
            case noResponders = "no_responders"
            case authToken = "auth_token"
        }
    }

    package static func writeConnect(_ options: ConnectOptions, to buffer: inout ByteBuffer) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let json = (try? encoder.encode(options)) ?? Data("{}".utf8)
        buffer.writeString("CONNECT ")
        buffer.writeBytes(json)
        buffer.writeString("\r\n")
    }

    /// `PUB subject size` or, with headers, `HPUB subject headerSize totalSize`, then the bytes and `\r\n`.
    ///
    /// - Returns: the size of the header block (0 without headers): with the payload, what `max_payload` limits.
    @discardableResult
    package static func writePublish(
        subject: String, replyTo: String? = nil, headers: NATSHeaders?, payload: ByteBuffer, to buffer: inout ByteBuffer
    ) -> Int {
        guard let headers else {
            buffer.writeString("PUB ")
            buffer.writeString(subject)
            if let replyTo {
                buffer.writeString(" ")
                buffer.writeString(replyTo)
            }
            buffer.writeString(" \(payload.readableBytes)\r\n")
            buffer.writeImmutableBuffer(payload)
            buffer.writeString("\r\n")
            return 0
        }
        var block = ByteBuffer()
        let headerSize = headers.write(to: &block)
        buffer.writeString("HPUB ")
        buffer.writeString(subject)
        if let replyTo {
            buffer.writeString(" ")
            buffer.writeString(replyTo)
        }
        buffer.writeString(" \(headerSize) \(headerSize + payload.readableBytes)\r\n")
        buffer.writeImmutableBuffer(block)
        buffer.writeImmutableBuffer(payload)
        buffer.writeString("\r\n")
        return headerSize
    }

    package static func writeSubscribe(subject: String, queueGroup: String?, sid: UInt64, to buffer: inout ByteBuffer) {
        buffer.writeString("SUB ")
        buffer.writeString(subject)
        if let queueGroup {
            buffer.writeString(" ")
            buffer.writeString(queueGroup)
        }
        buffer.writeString(" \(sid)\r\n")
    }

    package static func writeUnsubscribe(sid: UInt64, to buffer: inout ByteBuffer) {
        buffer.writeString("UNSUB \(sid)\r\n")
    }

    package static func writePing(to buffer: inout ByteBuffer) { buffer.writeString("PING\r\n") }
    package static func writePong(to buffer: inout ByteBuffer) { buffer.writeString("PONG\r\n") }
}
