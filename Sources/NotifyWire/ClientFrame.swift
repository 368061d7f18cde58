import NIOCore

/// A frame sent by a client to the daemon (protocol v1).
package enum ClientFrame: Sendable, Hashable {
    /// Opens the session; must be the first frame on a connection.
    case hello(Hello)
    /// Subscribes to a name or pattern under a client-chosen subscription id. Answered with `OK` or `ERROR`
    /// (with ``SubscribeFlags/sendRetained``, `RETAINED` frames come first, then the `OK`; with
    /// ``SubscribeFlags/states`` too, `STATE_CHANGED` frames carrying the current values). With
    /// ``SubscribeFlags/marksRetained``, later posts made with retain come as `RETAINED` frames with request id 0.
    case subscribe(Subscribe)
    /// Removes a subscription. Answered with `OK` or `ERROR`.
    case unsubscribe(requestID: UInt32, subscriptionID: UInt32)
    /// Posts a notification. Answered with `POSTED` when ``PostFlags/ackWanted`` is set, with `ERROR` when
    /// rejected, and otherwise not at all.
    case post(Post)
    /// An ordering barrier: answered with `PONG` after everything sent before it was processed.
    case ping(requestID: UInt32)
    /// Sets the state value of a name. Answered with `OK` or `ERROR`.
    case setState(requestID: UInt32, name: String, value: UInt64)
    /// Reads the state value of a name. Answered with `STATE`.
    case getState(requestID: UInt32, name: String)
    /// Holds this connection's notifications (nestable). Answered with `OK`.
    case suspend(requestID: UInt32)
    /// Undoes one `SUSPEND`; the last one releases what was held. Answered with `OK` or `ERROR`.
    case resume(requestID: UInt32)
    /// Asks for introspection data. Answered with `QUERY_RESULT` or `ERROR`.
    case query(requestID: UInt32, kind: UInt8, argument: String)

    /// The fields of `SUBSCRIBE`.
    package struct Subscribe: Sendable, Hashable {
        /// Chosen by the client; echoed in the reply.
        package var requestID: UInt32
        /// Chosen by the client; names the subscription in `UNSUBSCRIBE` and `OVERFLOW`.
        package var subscriptionID: UInt32
        /// Options.
        package var flags: SubscribeFlags
        /// The `policy` byte as received; see ``policy``.
        package var policyCode: UInt8
        /// The `queue_limit` field as received.
        package var queueLimit: UInt32
        /// A name, or a pattern with `*` and `>` labels.
        package var pattern: String

        /// What to do with notifications the connection cannot take in time, or `nil` when the `policy` and
        /// `queue_limit` fields describe no policy (the daemon answers `invalid-request`).
        package var policy: DeliveryPolicy? { DeliveryPolicy(code: policyCode, queueLimit: queueLimit) }

        /// Creates the fields of `SUBSCRIBE`.
        package init(
            requestID: UInt32, subscriptionID: UInt32, flags: SubscribeFlags = [], policy: DeliveryPolicy = .coalesce,
            pattern: String
        ) {
            self.init(
                requestID: requestID, subscriptionID: subscriptionID, flags: flags, policyCode: policy.code,
                queueLimit: policy.queueLimit, pattern: pattern)
        }

        /// Creates the fields of `SUBSCRIBE` from raw policy fields.
        package init(
            requestID: UInt32, subscriptionID: UInt32, flags: SubscribeFlags, policyCode: UInt8, queueLimit: UInt32,
            pattern: String
        ) {
            self.requestID = requestID
            self.subscriptionID = subscriptionID
            self.flags = flags
            self.policyCode = policyCode
            self.queueLimit = queueLimit
            self.pattern = pattern
        }
    }

    /// The fields of `HELLO`.
    package struct Hello: Sendable, Hashable {
        /// The protocol version the client speaks.
        package var version: UInt16
        /// Reserved; zero in protocol v1.
        package var flags: UInt32
        /// A short name for logs and introspection, at most 255 bytes of UTF-8.
        package var clientName: String

        /// Creates the fields of `HELLO`.
        package init(version: UInt16 = ProtocolConstants.version, flags: UInt32 = 0, clientName: String) {
            self.version = version
            self.flags = flags
            self.clientName = clientName
        }
    }

    /// The fields of `POST`.
    package struct Post: Sendable, Hashable {
        /// Chosen by the client; echoed in the `POSTED` or `ERROR` reply.
        package var requestID: UInt32
        /// Options of this post.
        package var flags: PostFlags
        /// The notification name.
        package var name: String
        /// The payload bytes, opaque to the daemon.
        package var payload: ByteBuffer
        /// Where a relay says the notification was first posted; present exactly when ``flags`` has
        /// ``PostFlags/origin``.
        package var origin: RelayOrigin?

        /// Creates the fields of `POST`; an `origin` sets the origin flag (``flags`` are otherwise kept as given, so a
        /// test can send the flag without the field).
        package init(
            requestID: UInt32, flags: PostFlags = [], name: String, payload: ByteBuffer, origin: RelayOrigin? = nil
        ) {
            self.requestID = requestID
            self.flags = origin == nil ? flags : flags.union(.origin)
            self.name = name
            self.payload = payload
            self.origin = origin
        }
    }

    /// The message type of this frame.
    package var messageType: MessageType {
        switch self {
        case .hello: .hello
        case .subscribe: .subscribe
        case .unsubscribe: .unsubscribe
        case .post: .post
        case .ping: .ping
        case .setState: .setState
        case .getState: .getState
        case .suspend: .suspend
        case .resume: .resume
        case .query: .query
        }
    }
}

/// Options of a `POST` (the `flags` byte).
package struct PostFlags: OptionSet, Sendable, Hashable {
    /// The flag bits as sent on the wire.
    package let rawValue: UInt8
    /// Flags from their wire bits.
    package init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Ask for a `POSTED` reply carrying the number of connections the notification was delivered to.
    package static let ackWanted = PostFlags(rawValue: 0x01)

    /// Ask the daemon to keep this notification as the name's retained notification, handed to later
    /// subscriptions that ask for it.
    package static let retain = PostFlags(rawValue: 0x02)

    /// An origin field follows the payload: the post is relayed from another host (PROTOCOL.md § 16).
    package static let origin = PostFlags(rawValue: 0x04)

    /// Every flag protocol v1 defines; a daemon rejects others with `unsupported-flags`.
    package static let known: PostFlags = [.ackWanted, .retain, .origin]
}

/// Options of a `SUBSCRIBE` (the `flags` byte).
package struct SubscribeFlags: OptionSet, Sendable, Hashable {
    /// The flag bits as sent on the wire.
    package let rawValue: UInt8
    /// Flags from their wire bits.
    package init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Before the `OK`, send the retained notification of every name the pattern matches, as `RETAINED`
    /// frames carrying this request's id.
    package static let sendRetained = SubscribeFlags(rawValue: 0x01)

    /// Watch the state values of the matching names instead of their notifications: the connection is sent a
    /// `STATE_CHANGED` for every `SET_STATE` on them (with ``sendRetained``: their current values first).
    package static let states = SubscribeFlags(rawValue: 0x02)

    /// Mark retained posts: a post made with retain that this subscription matches reaches the connection as a
    /// `RETAINED` frame with request id 0 instead of a `NOTIFICATION` (PROTOCOL.md § 6.2, § 9.5). Not with
    /// ``states``.
    package static let marksRetained = SubscribeFlags(rawValue: 0x04)

    /// Every flag protocol v1 defines; a daemon rejects others with `unsupported-flags`.
    package static let known: SubscribeFlags = [.sendRetained, .states, .marksRetained]
}

/// Options of a `HELLO` (the `flags` field).
package enum HelloFlags {
    /// The client understands an origin field after the payload of `NOTIFICATION`, `NOTIFICATION_MERGED` and
    /// `RETAINED` for relayed posts (PROTOCOL.md § 16); without it the daemon never sends one.
    package static let origins: UInt32 = 0x0000_0001
    /// Posts made on this connection are never delivered back to it, whatever it subscribed to (NATS's `echo`
    /// off): for a relay, which would only throw its own posts away.
    package static let noEcho: UInt32 = 0x0000_0002
}

extension ClientFrame.Post {
    /// Encodes a whole `POST` frame from its fields, without a ``ClientFrame/Post`` value or a `ByteBuffer` for
    /// the payload: a client posts straight from the caller's bytes. The same bytes as encoding
    /// `ClientFrame.post(Post(requestID:flags:name:payload:))`.
    ///
    /// The caller guarantees that `name` fits in 65,535 bytes (a valid name does) and `payload` in `UInt32`.
    /// Written with one reservation of the buffer: posting runs this for every post.
    package static func encode(
        requestID: UInt32, flags: PostFlags, name: String, payload: UnsafeRawBufferPointer,
        into buffer: inout ByteBuffer
    ) {
        var name = name
        name.withUTF8 { nameBytes in
            precondition(nameBytes.count <= Int(UInt16.max), "wire strings are limited to 65,535 bytes")
            // type u8, request_id u32, flags u8, name (u16 + bytes), payload (u32 + bytes)
            let bodyLength = 1 + 4 + 1 + 2 + nameBytes.count + 4 + payload.count
            let total = ProtocolConstants.lengthPrefixSize + bodyLength
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { out in
                out.storeBytes(of: UInt32(bodyLength).bigEndian, toByteOffset: 0, as: UInt32.self)
                out[4] = MessageType.post.rawValue
                out.storeBytes(of: requestID.bigEndian, toByteOffset: 5, as: UInt32.self)
                out[9] = flags.rawValue
                out.storeBytes(of: UInt16(nameBytes.count).bigEndian, toByteOffset: 10, as: UInt16.self)
                var position = 12
                UnsafeMutableRawBufferPointer(rebasing: out[position..<(position + nameBytes.count)])
                    .copyMemory(from: UnsafeRawBufferPointer(nameBytes))
                position += nameBytes.count
                out.storeBytes(of: UInt32(payload.count).bigEndian, toByteOffset: position, as: UInt32.self)
                position += 4
                UnsafeMutableRawBufferPointer(rebasing: out[position..<(position + payload.count)]).copyMemory(from: payload)
                return total
            }
        }
    }
}

extension ClientFrame: WireFrameEncodable {
    /// Appends the whole frame (length prefix, type byte, fields) to `buffer`.
    package func encode(into buffer: inout ByteBuffer) {
        if case .post(let post) = self {
            let start = buffer.writerIndex
            post.payload.withUnsafeReadableBytes { payload in
                Post.encode(requestID: post.requestID, flags: post.flags, name: post.name, payload: payload, into: &buffer)
            }
            post.origin?.append(toFrameAt: start, in: &buffer)
            return
        }
        buffer.writeWireFrame(messageType) { buffer in
            switch self {
            case .hello(let hello):
                buffer.writeInteger(hello.version)
                buffer.writeInteger(hello.flags)
                buffer.writeWireString(hello.clientName)
            case .subscribe(let subscribe):
                buffer.writeInteger(subscribe.requestID)
                buffer.writeInteger(subscribe.subscriptionID)
                buffer.writeInteger(subscribe.flags.rawValue)
                buffer.writeInteger(subscribe.policyCode)
                buffer.writeInteger(subscribe.queueLimit)
                buffer.writeWireString(subscribe.pattern)
            case .unsubscribe(let requestID, let subscriptionID):
                buffer.writeInteger(requestID)
                buffer.writeInteger(subscriptionID)
            case .post:
                preconditionFailure("POST is encoded by ClientFrame.Post.encode, above")
            case .ping(let requestID), .suspend(let requestID), .resume(let requestID):
                buffer.writeInteger(requestID)
            case .setState(let requestID, let name, let value):
                buffer.writeInteger(requestID)
                buffer.writeInteger(value)
                buffer.writeWireString(name)
            case .getState(let requestID, let name):
                buffer.writeInteger(requestID)
                buffer.writeWireString(name)
            case .query(let requestID, let kind, let argument):
                buffer.writeInteger(requestID)
                buffer.writeInteger(kind)
                buffer.writeWireString(argument)
            }
        }
    }
}

extension ClientFrame: WireFrameDecodable {
    /// Decodes a frame from its type byte and the fields after it; throws on anything malformed.
    package static func decode(type: UInt8, body: inout ByteBuffer) throws(WireDecodingError) -> ClientFrame {
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
            let flags: UInt8 = try body.readWireInteger(messageType, "flags")
            let policyCode: UInt8 = try body.readWireInteger(messageType, "policy")
            let queueLimit: UInt32 = try body.readWireInteger(messageType, "queue_limit")
            let pattern = try body.readWireString(messageType, "pattern")
            frame = .subscribe(
                Subscribe(
                    requestID: requestID, subscriptionID: subscriptionID, flags: SubscribeFlags(rawValue: flags),
                    policyCode: policyCode, queueLimit: queueLimit, pattern: pattern))
        case .unsubscribe:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let subscriptionID: UInt32 = try body.readWireInteger(messageType, "subscription_id")
            frame = .unsubscribe(requestID: requestID, subscriptionID: subscriptionID)
        case .post:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let flags: UInt8 = try body.readWireInteger(messageType, "flags")
            let name = try body.readWireString(messageType, "name")
            let payload = try body.readWirePayload(messageType, "payload")
            let postFlags = PostFlags(rawValue: flags)
            let origin = postFlags.contains(.origin) ? try RelayOrigin.decode(messageType, &body) : nil
            frame = .post(Post(requestID: requestID, flags: postFlags, name: name, payload: payload, origin: origin))
        case .ping:
            frame = .ping(requestID: try body.readWireInteger(messageType, "request_id"))
        case .suspend:
            frame = .suspend(requestID: try body.readWireInteger(messageType, "request_id"))
        case .resume:
            frame = .resume(requestID: try body.readWireInteger(messageType, "request_id"))
        case .setState:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let value: UInt64 = try body.readWireInteger(messageType, "value")
            let name = try body.readWireString(messageType, "name")
            frame = .setState(requestID: requestID, name: name, value: value)
        case .getState:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let name = try body.readWireString(messageType, "name")
            frame = .getState(requestID: requestID, name: name)
        case .query:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let kind: UInt8 = try body.readWireInteger(messageType, "kind")
            let argument = try body.readWireString(messageType, "argument")
            frame = .query(requestID: requestID, kind: kind, argument: argument)
        case .welcome, .ok, .posted, .pong, .notification, .overflow, .error, .state, .notificationMerged, .retained,
            .queryResult, .queryResultPart, .stateChanged, .goodbye:
            throw WireDecodingError.unknownMessageType(type)
        }
        try body.ensureFullyRead(messageType)
        return frame
    }
}
