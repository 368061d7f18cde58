import NIOCore

/// One operation a NATS server sends to a client (the NATS client protocol, "Protocol messages").
package enum NATSServerOperation: Equatable, Sendable {
    /// `INFO {json}`: the server's identity and limits, sent on connect and when the cluster changes.
    case info(NATSServerInfo)
    /// `MSG` or `HMSG`: a message for one of the client's subscriptions.
    case message(NATSMessage)
    /// `PING`: the server checks the client is alive; answer `PONG`.
    case ping
    /// `PONG`: the answer to the client's `PING`.
    case pong
    /// `+OK`: acknowledges a request in verbose mode (the client never asks for it).
    case ok
    /// `-ERR 'text'`: a protocol or authorization error; most close the connection.
    case error(String)
}

/// A message received on a subscription.
package struct NATSMessage: Equatable, Sendable {
    /// The subject it was published to.
    package var subject: String
    /// The subscription id it was delivered for.
    package var sid: UInt64
    /// The reply subject, if the publisher gave one.
    package var replyTo: String?
    /// Its headers (`HMSG`), or nil for a plain `MSG`.
    package var headers: NATSHeaders?
    /// The payload, byte for byte.
    package var payload: ByteBuffer

    /// Creates a message (for tests and for callers that forward messages).
    package init(subject: String, sid: UInt64, replyTo: String? = nil, headers: NATSHeaders? = nil, payload: ByteBuffer) {
        self.subject = subject
        self.sid = sid
        self.replyTo = replyTo
        self.headers = headers
        self.payload = payload
    }
}

/// The fields of a server's `INFO` the client uses. Unknown fields are ignored.
package struct NATSServerInfo: Codable, Equatable, Sendable {
    /// The server's unique id.
    package var serverID: String
    /// The largest payload the server accepts, in bytes.
    package var maxPayload: Int
    /// Whether the server understands `HPUB`/`HMSG`.
    package var headers: Bool
    /// Whether the server requires credentials.
    package var authRequired: Bool
    /// Other servers of the cluster the client may reconnect to (`host:port`).
    package var connectURLs: [String]
    /// The protocol level the server speaks.
    package var proto: Int

    enum CodingKeys: String, CodingKey {
        case serverID = "server_id"
        case maxPayload = "max_payload"
        case headers
        case authRequired = "auth_required"
        case connectURLs = "connect_urls"
        case proto
    }

    /// Creates an info record (for tests).
    package init(
        serverID: String, maxPayload: Int = 1_048_576, headers: Bool = true, authRequired: Bool = false,
        connectURLs: [String] = [], proto: Int = 1
    ) {
        self.serverID = serverID
        self.maxPayload = maxPayload
        self.headers = headers
        self.authRequired = authRequired
        self.connectURLs = connectURLs
        self.proto = proto
    }

    /// Decodes an `INFO` document, tolerating every field being absent except the server id.
    package init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        serverID = try c.decodeIfPresent(String.self, forKey: .serverID) ?? ""
        maxPayload = try c.decodeIfPresent(Int.self, forKey: .maxPayload) ?? 1_048_576
        headers = try c.decodeIfPresent(Bool.self, forKey: .headers) ?? false
        authRequired = try c.decodeIfPresent(Bool.self, forKey: .authRequired) ?? false
        connectURLs = try c.decodeIfPresent([String].self, forKey: .connectURLs) ?? []
        proto = try c.decodeIfPresent(Int.self, forKey: .proto) ?? 0
    }
}
