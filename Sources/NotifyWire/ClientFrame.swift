import NIOCore

/// A frame sent by a client to the daemon (protocol v1).
public enum ClientFrame: Sendable, Hashable {
    /// Opens the session; must be the first frame on a connection.
    case hello(Hello)
    /// Subscribes to a name under a client-chosen subscription id. Answered with `OK` or `ERROR`.
    case subscribe(requestID: UInt32, subscriptionID: UInt32, name: String)
    /// Removes a subscription. Answered with `OK` or `ERROR`.
    case unsubscribe(requestID: UInt32, subscriptionID: UInt32)
    /// Posts a notification. Answered with `POSTED` when ``PostFlags/ackWanted`` is set, with `ERROR` when
    /// rejected, and otherwise not at all.
    case post(Post)
    /// An ordering barrier: answered with `PONG` after everything sent before it was processed.
    case ping(requestID: UInt32)

    /// The fields of `HELLO`.
    public struct Hello: Sendable, Hashable {
        /// The protocol version the client speaks.
        public var version: UInt16
        /// Reserved; zero in protocol v1.
        public var flags: UInt32
        /// A short name for logs and introspection, at most 255 bytes of UTF-8.
        public var clientName: String

        /// Creates the fields of `HELLO`.
        public init(version: UInt16 = ProtocolConstants.version, flags: UInt32 = 0, clientName: String) {
            self.version = version
            self.flags = flags
            self.clientName = clientName
        }
    }

    /// The fields of `POST`.
    public struct Post: Sendable, Hashable {
        /// Chosen by the client; echoed in the `POSTED` or `ERROR` reply.
        public var requestID: UInt32
        /// Options of this post.
        public var flags: PostFlags
        /// The notification name.
        public var name: String
        /// The payload bytes, opaque to the daemon.
        public var payload: ByteBuffer

        /// Creates the fields of `POST`.
        public init(requestID: UInt32, flags: PostFlags = [], name: String, payload: ByteBuffer) {
            self.requestID = requestID
            self.flags = flags
            self.name = name
            self.payload = payload
        }
    }

    /// The message type of this frame.
    public var messageType: MessageType {
        switch self {
        case .hello: .hello
        case .subscribe: .subscribe
        case .unsubscribe: .unsubscribe
        case .post: .post
        case .ping: .ping
        }
    }
}

/// Options of a `POST` (the `flags` byte).
public struct PostFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Ask for a `POSTED` reply carrying the number of connections the notification was delivered to.
    public static let ackWanted = PostFlags(rawValue: 0x01)

    /// Every flag protocol v1 defines; a daemon rejects others with `unsupported-flags`.
    public static let known: PostFlags = [.ackWanted]
}

extension ClientFrame: WireFrameEncodable {
    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeWireFrame(messageType) { buffer in
            switch self {
            case .hello(let hello):
                buffer.writeInteger(hello.version)
                buffer.writeInteger(hello.flags)
                buffer.writeWireString(hello.clientName)
            case .subscribe(let requestID, let subscriptionID, let name):
                buffer.writeInteger(requestID)
                buffer.writeInteger(subscriptionID)
                buffer.writeWireString(name)
            case .unsubscribe(let requestID, let subscriptionID):
                buffer.writeInteger(requestID)
                buffer.writeInteger(subscriptionID)
            case .post(let post):
                buffer.writeInteger(post.requestID)
                buffer.writeInteger(post.flags.rawValue)
                buffer.writeWireString(post.name)
                buffer.writeWirePayload(post.payload)
            case .ping(let requestID):
                buffer.writeInteger(requestID)
            }
        }
    }
}

extension ClientFrame: WireFrameDecodable {
    public static func decode(type: UInt8, body: inout ByteBuffer) throws(WireDecodingError) -> ClientFrame {
        guard let messageType = MessageType(rawValue: type), messageType.isClientToDaemon else {
            throw WireDecodingError.unknownMessageType(type)
        }
        let frame: ClientFrame
        switch messageType {
        case .hello:
            let version: UInt16 = try body.readWireInteger(messageType, "version")
            let flags: UInt32 = try body.readWireInteger(messageType, "flags")
            let clientName = try body.readWireString(messageType, "client_name")
            frame = .hello(Hello(version: version, flags: flags, clientName: clientName))
        case .subscribe:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let subscriptionID: UInt32 = try body.readWireInteger(messageType, "subscription_id")
            let name = try body.readWireString(messageType, "name")
            frame = .subscribe(requestID: requestID, subscriptionID: subscriptionID, name: name)
        case .unsubscribe:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let subscriptionID: UInt32 = try body.readWireInteger(messageType, "subscription_id")
            frame = .unsubscribe(requestID: requestID, subscriptionID: subscriptionID)
        case .post:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let flags: UInt8 = try body.readWireInteger(messageType, "flags")
            let name = try body.readWireString(messageType, "name")
            let payload = try body.readWirePayload(messageType, "payload")
            frame = .post(Post(requestID: requestID, flags: PostFlags(rawValue: flags), name: name, payload: payload))
        case .ping:
            frame = .ping(requestID: try body.readWireInteger(messageType, "request_id"))
        case .welcome, .ok, .posted, .pong, .notification, .overflow, .error:
            throw WireDecodingError.unknownMessageType(type)
        }
        try body.ensureFullyRead(messageType)
        return frame
    }
}
