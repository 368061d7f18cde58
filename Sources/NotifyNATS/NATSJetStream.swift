import Foundation
import NIOCore

/// An error the JetStream API answered with: `{"error":{"code":404,"err_code":10059,"description":"stream not
/// found"}}`.
package struct NATSJetStreamAPIError: Error, Equatable, Sendable, Codable, CustomStringConvertible {
    /// The HTTP-like status code (`404`, `400`, `503`, ...).
    package var code: Int
    /// JetStream's own error code (`10059`: stream not found, `10037`: no message found, ...); 0 when absent.
    package var errorCode: Int
    /// The server's explanation, as it sent it.
    package var description: String

    /// JetStream's code for "stream not found".
    package static let streamNotFound = 10059
    /// JetStream's code for "no message found".
    package static let noMessageFound = 10037
    /// JetStream's code for "stream name already in use" (with another configuration).
    package static let streamNameInUse = 10058

    /// Creates an error (for tests and for callers that translate errors).
    package init(code: Int, errorCode: Int, description: String) {
        self.code = code
        self.errorCode = errorCode
        self.description = description
    }

    enum CodingKeys: String, CodingKey {
        case code
        case errorCode = "err_code"
        case description
    }

    /// Decodes the `error` object, tolerating absent fields.
    package init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        code = try c.decodeIfPresent(Int.self, forKey: .code) ?? 0
        errorCode = try c.decodeIfPresent(Int.self, forKey: .errorCode) ?? 0
        description = try c.decodeIfPresent(String.self, forKey: .description) ?? "unknown JetStream error"
    }
}

/// The few JetStream API calls the key-value store needs: JSON requests to `$JS.API.…` subjects over
/// ``NATSClient/request(_:payload:headers:timeout:)``.
package struct NATSJetStream: Sendable {
    package let client: NATSClient
    /// How long each API call may take.
    package var timeout: TimeAmount
    package let apiPrefix = "$JS.API"

    package init(client: NATSClient, timeout: TimeAmount = .seconds(5)) {
        self.client = client
        self.timeout = timeout
    }

    /// A stream's configuration: the fields the key-value store sets or reads. Encoded in the server's
    /// snake_case; durations in nanoseconds.
    package struct StreamConfig: Codable, Sendable, Equatable {
        package var name: String
        package var subjects: [String]?
        package var retention: String? = "limits"
        package var maxConsumers: Int? = -1
        package var maxMsgs: Int? = -1
        package var maxBytes: Int? = -1
        package var maxAge: Int64? = 0
        package var maxMsgsPerSubject: Int? = 1
        package var maxMsgSize: Int? = -1
        package var storage: String? = "file"
        package var discard: String? = "new"
        package var numReplicas: Int? = 1
        package var duplicateWindow: Int64? = 120_000_000_000
        package var allowRollupHdrs: Bool? = true
        package var denyDelete: Bool? = true
        package var allowDirect: Bool? = true

        package init(name: String, subjects: [String]) {
            self.name = name
            self.subjects = subjects
        }
    }

    /// What `STREAM.INFO` and `STREAM.CREATE` answer (the parts used).
    package struct StreamInfo: Decodable, Sendable {
        package var config: StreamConfig
        /// When the stream was created (the server's timestamp, as sent): a stream deleted and created again under
        /// the same name has another.
        package var created: String?
    }

    /// An ephemeral push consumer's configuration.
    package struct ConsumerConfig: Codable, Sendable, Equatable {
        package var deliverSubject: String
        package var deliverPolicy: String
        package var optStartSeq: UInt64?
        package var ackPolicy = "none"
        package var maxDeliver = 1
        package var filterSubject: String
        package var replayPolicy = "instant"
        package var flowControl: Bool
        /// Nanoseconds; nil for none.
        package var idleHeartbeat: Int64?
        package var memStorage = true
        package var numReplicas = 1
        /// Nanoseconds after which the server removes the consumer if no one listens.
        package var inactiveThreshold: Int64?

        package init(
            deliverSubject: String, deliverPolicy: String, optStartSeq: UInt64? = nil, filterSubject: String,
            flowControl: Bool, idleHeartbeat: Int64?, inactiveThreshold: Int64?
        ) {
            self.deliverSubject = deliverSubject
            self.deliverPolicy = deliverPolicy
            self.optStartSeq = optStartSeq
            self.filterSubject = filterSubject
            self.flowControl = flowControl
            self.idleHeartbeat = idleHeartbeat
            self.inactiveThreshold = inactiveThreshold
        }
    }

    /// What `CONSUMER.CREATE` answers (the parts used).
    package struct ConsumerInfo: Decodable, Sendable {
        package var name: String
        package var numPending: UInt64
    }

    /// A publish acknowledgement: the stream and the sequence the message got.
    package struct PubAck: Decodable, Sendable {
        package var stream: String
        package var seq: UInt64
    }

    /// A stored message, as `STREAM.MSG.GET` or `DIRECT.GET` returns it.
    package struct StoredMessage: Sendable {
        package var subject: String
        package var sequence: UInt64
        package var headers: NATSHeaders?
        package var data: ByteBuffer
        package var time: Date?
    }

    /// `STREAM.INFO`: the stream's configuration and creation time; ``NATSJetStreamAPIError/streamNotFound`` when
    /// there is no such stream.
    package func streamInfo(_ stream: String) async throws -> StreamInfo {
        try await call("STREAM.INFO.\(stream)", body: ByteBuffer(), as: StreamInfo.self)
    }

    /// `STREAM.CREATE`: creates the stream (idempotent for an identical configuration).
    package func createStream(_ config: StreamConfig) async throws -> StreamInfo {
        try await call("STREAM.CREATE.\(config.name)", body: try Self.encode(config), as: StreamInfo.self)
    }

    /// `CONSUMER.CREATE`: an ephemeral consumer (no name: the server picks one).
    package func createConsumer(stream: String, config: ConsumerConfig) async throws -> ConsumerInfo {
        struct Request: Encodable {
            var streamName: String
            var config: ConsumerConfig
        }
        let body = try Self.encode(Request(streamName: stream, config: config))
        return try await call("CONSUMER.CREATE.\(stream)", body: body, as: ConsumerInfo.self)
    }

    /// `CONSUMER.DELETE`.
    package func deleteConsumer(stream: String, name: String) async throws {
        struct Deleted: Decodable { var success: Bool? }
        _ = try await call("CONSUMER.DELETE.\(stream).\(name)", body: ByteBuffer(), as: Deleted.self)
    }

    /// Publishes to a stream's subject and waits for its acknowledgement.
    package func publish(_ subject: String, payload: ByteBuffer, headers: NATSHeaders?) async throws -> PubAck {
        let reply = try await client.request(subject, payload: payload, headers: headers, timeout: timeout)
        return try Self.decode(PubAck.self, from: reply.payload)
    }

    /// The last message on `subject` in `stream`, or nil when there is none. `direct` uses `DIRECT.GET` (any
    /// replica answers; the stream must allow it), otherwise `STREAM.MSG.GET` (the leader answers).
    package func lastMessage(stream: String, subject: String, direct: Bool) async throws -> StoredMessage? {
        if direct {
            let reply = try await client.request("\(apiPrefix).DIRECT.GET.\(stream).\(subject)", timeout: timeout)
            return try Self.storedMessage(fromDirectReply: reply)
        }
        struct Request: Encodable { var lastBySubj: String }
        struct Response: Decodable {
            struct Message: Decodable {
                var subject: String
                var seq: UInt64
                var hdrs: String?
                var data: String?
                var time: String?
            }
            var message: Message
        }
        let response: Response
        do {
            response = try await call(
                "STREAM.MSG.GET.\(stream)", body: try Self.encode(Request(lastBySubj: subject)), as: Response.self)
        } catch let error as NATSJetStreamAPIError where error.errorCode == NATSJetStreamAPIError.noMessageFound {
            return nil
        }
        let message = response.message
        var headers: NATSHeaders?
        if let hdrs = message.hdrs, let bytes = Data(base64Encoded: hdrs), !bytes.isEmpty {
            headers = try NATSHeaders.parse(ByteBuffer(bytes: bytes))
        }
        let data = message.data.flatMap { Data(base64Encoded: $0) }.map { ByteBuffer(bytes: $0) } ?? ByteBuffer()
        return StoredMessage(
            subject: message.subject, sequence: message.seq, headers: headers, data: data,
            time: message.time.flatMap(Self.parseTime))
    }

    /// A `DIRECT.GET` reply: the stored message with `Nats-Stream`, `Nats-Subject`, `Nats-Sequence` and
    /// `Nats-Time-Stamp` headers, or a header-only status (`404`: none).
    package static func storedMessage(fromDirectReply reply: NATSMessage) throws -> StoredMessage? {
        guard var headers = reply.headers else {
            throw NATSKeyValueError.unexpectedResponse("a direct get reply without headers")
        }
        if let status = headers.status, reply.payload.readableBytes == 0 {
            if status == 404 { return nil }
            throw NATSJetStreamAPIError(code: status, errorCode: 0, description: "direct get failed with status \(status)")
        }
        guard let subject = headers["Nats-Subject"], let sequence = headers["Nats-Sequence"].flatMap({ UInt64($0) })
        else { throw NATSKeyValueError.unexpectedResponse("a direct get reply without Nats-Subject or Nats-Sequence") }
        let time = headers["Nats-Time-Stamp"].flatMap(parseTime)
        let added: Set<String> = ["Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Last-Sequence"]
        headers = NATSHeaders(headers.fields.filter { !added.contains($0.name) }.map { ($0.name, $0.value) })
        return StoredMessage(
            subject: subject, sequence: sequence, headers: headers.fields.isEmpty ? nil : headers, data: reply.payload,
            time: time)
    }

    /// An API call: `body` to `$JS.API.<api>`, the JSON answer decoded as `T`, or its `error` thrown.
    private func call<T: Decodable>(_ api: String, body: ByteBuffer, as type: T.Type) async throws -> T {
        let reply = try await client.request("\(apiPrefix).\(api)", payload: body, timeout: timeout)
        return try Self.decode(type, from: reply.payload)
    }

    /// Decodes a JetStream API answer: a ``NATSJetStreamAPIError`` if it has an `error`, otherwise `T`.
    package static func decode<T: Decodable>(_ type: T.Type, from payload: ByteBuffer) throws -> T {
        let data = Data(payload.readableBytesView)
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        if let envelope = try? JSONDecoder().decode(ErrorEnvelope.self, from: data), let error = envelope.error {
            throw error
        }
        do {
            return try decoder.decode(type, from: data)
        } catch {
            throw NATSKeyValueError.unexpectedResponse("\(error): \(String(decoding: data.prefix(200), as: UTF8.self))")
        }
    }

    private struct ErrorEnvelope: Decodable { var error: NATSJetStreamAPIError? }

    /// A request body in the server's snake_case.
    package static func encode<T: Encodable>(_ value: T) throws -> ByteBuffer {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return ByteBuffer(bytes: try encoder.encode(value))
    }

    /// RFC 3339 with up to nanoseconds, as the server writes times (`2024-05-01T10:00:00.123456789Z`).
    package static func parseTime(_ text: String) -> Date? {
        var whole = Substring(text)
        var fraction = 0.0
        if let dot = text.firstIndex(of: ".") {
            let digitsEnd = text[text.index(after: dot)...].firstIndex { !$0.isNumber } ?? text.endIndex
            fraction = Double("0" + text[dot..<digitsEnd]) ?? 0
            whole = text[..<dot] + text[digitsEnd...]
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: String(whole)).map { $0.addingTimeInterval(fraction) }
    }
}
