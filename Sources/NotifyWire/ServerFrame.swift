import NIOCore

/// A frame sent by the daemon to a client (protocol v1).
package enum ServerFrame: Sendable, Hashable {
    /// Answers `HELLO`: the session is open.
    case welcome(Welcome)
    /// `SUBSCRIBE` or `UNSUBSCRIBE` succeeded.
    case ok(requestID: UInt32)
    /// A `POST` that asked for an acknowledgement was delivered.
    case posted(requestID: UInt32, sequence: UInt64, deliveredCount: UInt32)
    /// Answers `PING`.
    case pong(requestID: UInt32)
    /// A notification on a name this connection subscribed to. Byte-identical for every recipient.
    case notification(NotificationFrame)
    /// Notifications were dropped: for one subscription under its `queue` policy (`subscriptionID` ≠ 0), or
    /// for the connection as a whole when its held notifications exceeded the daemon's bound
    /// (`subscriptionID` = 0).
    case overflow(subscriptionID: UInt32, droppedCount: UInt64)
    /// Answers `GET_STATE`: the name's state value, or `nil` when none was ever set.
    case state(requestID: UInt32, value: UInt64?)
    /// A coalesced notification: the latest of `mergedCount + 1` notifications on its name.
    case notificationMerged(mergedCount: UInt64, NotificationFrame)
    /// A retained notification sent because `SUBSCRIBE` request `requestID` asked for it; or, with `requestID` 0,
    /// a post made with retain, to a connection whose matching subscription has ``SubscribeFlags/marksRetained``.
    case retained(requestID: UInt32, NotificationFrame)
    /// Answers `QUERY`: UTF-8 JSON (`protocol/PROTOCOL.md` § 11).
    case queryResult(requestID: UInt32, json: ByteBuffer)
    /// Part of a long answer to a `QUERY` that asked for parts: a JSON array holding the next elements; the
    /// answer's last elements come in ``queryResult(requestID:json:)``.
    case queryResultPart(requestID: UInt32, json: ByteBuffer)
    /// A state value of a watched name: a change, or a current value sent before a `SUBSCRIBE`'s `OK`.
    case stateChanged(StateChangedFrame)
    /// A request failed, or (when ``ErrorFrame/closesConnection`` is set) the connection is being closed.
    case error(ErrorFrame)
    /// The daemon is shutting down: this is the last frame on the connection; reconnect after the given delay.
    case goodbye(GoodbyeFrame)

    /// The fields of `WELCOME`.
    package struct Welcome: Sendable, Hashable {
        /// The protocol version the daemon chose for this connection.
        package var version: UInt16
        /// The daemon's process id.
        package var daemonPID: UInt32
        /// Changes on every daemon start.
        package var instanceID: InstanceID
        /// The limits the daemon enforces.
        package var limits: ServerLimits
        /// The daemon's name and version, e.g. `notifyd 0.1.0`.
        package var serverName: String

        /// Creates the fields of `WELCOME`.
        package init(
            version: UInt16 = ProtocolConstants.version, daemonPID: UInt32, instanceID: InstanceID,
            limits: ServerLimits, serverName: String
        ) {
            self.version = version
            self.daemonPID = daemonPID
            self.instanceID = instanceID
            self.limits = limits
            self.serverName = serverName
        }
    }

    /// The message type of this frame.
    package var messageType: MessageType {
        switch self {
        case .welcome: .welcome
        case .ok: .ok
        case .posted: .posted
        case .pong: .pong
        case .notification: .notification
        case .overflow: .overflow
        case .error: .error
        case .state: .state
        case .notificationMerged: .notificationMerged
        case .retained: .retained
        case .queryResult: .queryResult
        case .queryResultPart: .queryResultPart
        case .stateChanged: .stateChanged
        case .goodbye: .goodbye
        }
    }
}

/// The fields of `NOTIFICATION`.
package struct NotificationFrame: Sendable, Hashable {
    /// The daemon-wide sequence number of the post (1 for the first post after the daemon started).
    package var sequence: UInt64
    /// The poster's credentials as the kernel reported them.
    package var sender: SenderCredentials
    /// The notification name.
    package var name: String
    /// The payload bytes as posted.
    package var payload: ByteBuffer
    /// Where a relay said the post came from, for a connection that asked for origins (PROTOCOL.md § 16).
    package var origin: RelayOrigin?

    /// Creates the fields of `NOTIFICATION`.
    package init(
        sequence: UInt64, sender: SenderCredentials, name: String, payload: ByteBuffer, origin: RelayOrigin? = nil
    ) {
        self.sequence = sequence
        self.sender = sender
        self.name = name
        self.payload = payload
        self.origin = origin
    }
}

/// The fields of `ERROR`.
package struct ErrorFrame: Sendable, Hashable, CustomStringConvertible {
    /// The request this error answers, or 0 when it concerns the connection as a whole.
    package var requestID: UInt32
    /// The numeric error code; see ``code``.
    package var rawCode: UInt16
    /// Whether the daemon closes the connection after this frame.
    package var closesConnection: Bool
    /// A human-readable explanation.
    package var message: String

    /// Creates an error frame with a known code; `closesConnection` follows ``ErrorCode/isFatal``.
    package init(requestID: UInt32, code: ErrorCode, message: String) {
        self.init(requestID: requestID, rawCode: code.rawValue, closesConnection: code.isFatal, message: message)
    }

    /// Creates an error frame from its raw fields.
    package init(requestID: UInt32, rawCode: UInt16, closesConnection: Bool, message: String) {
        self.requestID = requestID
        self.rawCode = rawCode
        self.closesConnection = closesConnection
        self.message = message.truncatedUTF8(maxBytes: ErrorFrame.maxMessageLength)
    }

    /// The error code, or `nil` if it is one this implementation does not know.
    package var code: ErrorCode? { ErrorCode(rawValue: rawCode) }

    /// The longest message the daemon sends, in UTF-8 bytes.
    package static let maxMessageLength = 1_024

    /// How this reads in logs and error messages.
    package var description: String {
        let name = code.map(String.init(describing:)) ?? "error-\(rawCode)"
        return "\(name): \(message)"
    }
}

extension ServerFrame: WireFrameEncodable {
    /// Appends the whole frame (length prefix, type byte, fields) to `buffer`.
    package func encode(into buffer: inout ByteBuffer) {
        if case .notification(let notification) = self {
            let start = buffer.writerIndex
            NotificationFrame.encode(
                sequence: notification.sequence, sender: notification.sender, name: notification.name,
                payload: notification.payload, into: &buffer)
            notification.origin?.append(toFrameAt: start, in: &buffer)
            return
        }
        buffer.writeWireFrame(messageType) { buffer in
            switch self {
            case .welcome(let welcome):
                buffer.writeInteger(welcome.version)
                buffer.writeInteger(welcome.daemonPID)
                buffer.writeInteger(welcome.instanceID.high)
                buffer.writeInteger(welcome.instanceID.low)
                buffer.writeInteger(welcome.limits.maxNameLength)
                buffer.writeInteger(welcome.limits.maxPayloadLength)
                buffer.writeInteger(welcome.limits.maxFrameLength)
                buffer.writeInteger(welcome.limits.maxSubscriptions)
                buffer.writeWireString(welcome.serverName)
            case .ok(let requestID), .pong(let requestID):
                buffer.writeInteger(requestID)
            case .posted(let requestID, let sequence, let deliveredCount):
                buffer.writeInteger(requestID)
                buffer.writeInteger(sequence)
                buffer.writeInteger(deliveredCount)
            case .notification:
                preconditionFailure("encoded above")
            case .overflow(let subscriptionID, let droppedCount):
                buffer.writeInteger(subscriptionID)
                buffer.writeInteger(droppedCount)
            case .state(let requestID, let value):
                buffer.writeInteger(requestID)
                buffer.writeInteger(UInt8(value == nil ? 0 : 1))
                buffer.writeInteger(value ?? 0)
            case .notificationMerged(let mergedCount, let notification):
                buffer.writeInteger(mergedCount)
                notification.encodeFields(into: &buffer)
            case .retained(let requestID, let notification):
                buffer.writeInteger(requestID)
                notification.encodeFields(into: &buffer)
            case .queryResult(let requestID, let json), .queryResultPart(let requestID, let json):
                buffer.writeInteger(requestID)
                buffer.writeWirePayload(json)
            case .stateChanged(let change):
                change.encodeFields(into: &buffer)
            case .error(let error):
                buffer.writeInteger(error.requestID)
                buffer.writeInteger(error.rawCode)
                buffer.writeInteger(UInt8(error.closesConnection ? 1 : 0))
                buffer.writeWireString(error.message)
            case .goodbye(let goodbye):
                buffer.writeInteger(goodbye.reconnectAfterMilliseconds)
                buffer.writeWireString(goodbye.reason)
            }
        }
    }
}

extension NotificationFrame {
    fileprivate static func decodeFields(
        _ messageType: MessageType, _ body: inout ByteBuffer
    ) throws(WireDecodingError) -> NotificationFrame {
        let sequence: UInt64 = try body.readWireInteger(messageType, "sequence")
        let pid: UInt32 = try body.readWireInteger(messageType, "sender_pid")
        let uid: UInt32 = try body.readWireInteger(messageType, "sender_uid")
        let gid: UInt32 = try body.readWireInteger(messageType, "sender_gid")
        let name = try body.readWireString(messageType, "name")
        let payload = try body.readWirePayload(messageType, "payload")
        // Bytes after the payload can only be an origin, which the daemon sends only to clients that asked.
        let origin = body.readableBytes > 0 ? try RelayOrigin.decode(messageType, &body) : nil
        return NotificationFrame(
            sequence: sequence, sender: SenderCredentials(pid: pid, uid: uid, gid: gid), name: name, payload: payload,
            origin: origin)
    }

    fileprivate func encodeFields(into buffer: inout ByteBuffer) {
        buffer.writeInteger(sequence)
        var name = name
        name.withUTF8 { name in
            let length = Self.senderAndNameLength(nameByteCount: name.count)
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { out in
                Self.writeSenderAndName(sender: sender, name: UnsafeRawBufferPointer(name), to: out)
                return length
            }
        }
        buffer.writeWirePayload(payload)
        origin?.encode(into: &buffer)
    }

    /// The bytes of the fields between the sequence number and the payload: what every post of a run shares.
    static func senderAndNameLength(nameByteCount: Int) -> Int { 12 + 2 + nameByteCount }

    /// Writes the sender's pid, uid and gid and the name with its length at the start of `out`: the one
    /// definition of these fields' layout, for every frame that carries a notification.
    static func writeSenderAndName(sender: SenderCredentials, name: UnsafeRawBufferPointer, to out: UnsafeMutableRawBufferPointer) {
        out.storeBytes(of: sender.pid.bigEndian, toByteOffset: 0, as: UInt32.self)
        out.storeBytes(of: sender.uid.bigEndian, toByteOffset: 4, as: UInt32.self)
        out.storeBytes(of: sender.gid.bigEndian, toByteOffset: 8, as: UInt32.self)
        out.storeBytes(of: UInt16(name.count).bigEndian, toByteOffset: 12, as: UInt16.self)
        if name.count > 0 { UnsafeMutableRawBufferPointer(rebasing: out[14..<(14 + name.count)]).copyMemory(from: name) }
    }

    /// Appends a whole `NOTIFICATION` frame whose sender and name fields are already encoded (see
    /// ``writeSenderAndName(sender:name:to:)``): the one encoder of `NOTIFICATION`, in one reservation
    /// (``NotificationRunEncoder/encodeFrame(sequence:senderAndName:payload:into:)``).
    ///
    /// - Returns: the frame's length, prefix included.
    @inlinable @inline(__always) @discardableResult
    static func encode(
        sequence: UInt64, senderAndName shared: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer,
        into buffer: inout ByteBuffer
    ) -> Int {
        NotificationRunEncoder.encodeFrame(sequence: sequence, senderAndName: shared, payload: payload, into: &buffer)
    }

    /// Encodes a whole `NOTIFICATION` frame without building a ``NotificationFrame`` value first, so a
    /// daemon can encode a post straight from its decoded fields, once for all recipients.
    package static func encode(
        sequence: UInt64, sender: SenderCredentials, name: String, payload: ByteBuffer,
        into buffer: inout ByteBuffer
    ) {
        var name = name
        name.withUTF8 { name in
            withUnsafeTemporaryAllocation(
                byteCount: senderAndNameLength(nameByteCount: name.count), alignment: 1
            ) { shared in
                writeSenderAndName(sender: sender, name: UnsafeRawBufferPointer(name), to: shared)
                _ = payload.withUnsafeReadableBytes { payload in
                    encode(sequence: sequence, senderAndName: UnsafeRawBufferPointer(shared), payload: payload, into: &buffer)
                }
            }
        }
    }

    /// The exact number of bytes ``encode(sequence:sender:name:payload:into:)`` writes.
    package static func encodedLength(nameByteCount: Int, payloadByteCount: Int) -> Int {
        ProtocolConstants.lengthPrefixSize + 1 + fixedFieldsLength + nameByteCount + payloadByteCount
    }

    /// The bytes of a `NOTIFICATION`'s fields other than the name's and the payload's: sequence, sender pid, uid
    /// and gid, and the two length fields.
    package static let fixedFieldsLength = 8 + 12 + 2 + 4
}

extension ServerFrame: WireFrameDecodable {
    /// Decodes a frame from its type byte and the fields after it; throws on anything malformed.
    package static func decode(type: UInt8, body: inout ByteBuffer) throws(WireDecodingError) -> ServerFrame {
        guard let messageType = MessageType(rawValue: type), !messageType.isClientToDaemon else {
            throw WireDecodingError.unknownMessageType(type)
        }
        let frame: ServerFrame
        switch messageType {
        case .welcome:
            let version: UInt16 = try body.readWireInteger(messageType, "version")
            let pid: UInt32 = try body.readWireInteger(messageType, "daemon_pid")
            let high: UInt64 = try body.readWireInteger(messageType, "instance_id")
            let low: UInt64 = try body.readWireInteger(messageType, "instance_id")
            let maxName: UInt16 = try body.readWireInteger(messageType, "max_name_length")
            let maxPayload: UInt32 = try body.readWireInteger(messageType, "max_payload_length")
            let maxFrame: UInt32 = try body.readWireInteger(messageType, "max_frame_length")
            let maxSubscriptions: UInt32 = try body.readWireInteger(messageType, "max_subscriptions")
            let serverName = try body.readWireString(messageType, "server_name")
            frame = .welcome(
                Welcome(
                    version: version, daemonPID: pid, instanceID: InstanceID(high: high, low: low),
                    limits: ServerLimits(
                        maxNameLength: maxName, maxPayloadLength: maxPayload, maxFrameLength: maxFrame,
                        maxSubscriptions: maxSubscriptions),
                    serverName: serverName))
        case .ok:
            frame = .ok(requestID: try body.readWireInteger(messageType, "request_id"))
        case .pong:
            frame = .pong(requestID: try body.readWireInteger(messageType, "request_id"))
        case .posted:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let sequence: UInt64 = try body.readWireInteger(messageType, "sequence")
            let delivered: UInt32 = try body.readWireInteger(messageType, "delivered_count")
            frame = .posted(requestID: requestID, sequence: sequence, deliveredCount: delivered)
        case .notification:
            frame = .notification(try NotificationFrame.decodeFields(messageType, &body))
        case .overflow:
            let subscriptionID: UInt32 = try body.readWireInteger(messageType, "subscription_id")
            let dropped: UInt64 = try body.readWireInteger(messageType, "dropped_count")
            frame = .overflow(subscriptionID: subscriptionID, droppedCount: dropped)
        case .state:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let flags: UInt8 = try body.readWireInteger(messageType, "flags")
            let value: UInt64 = try body.readWireInteger(messageType, "value")
            frame = .state(requestID: requestID, value: flags & 1 != 0 ? value : nil)
        case .notificationMerged:
            let merged: UInt64 = try body.readWireInteger(messageType, "merged_count")
            frame = .notificationMerged(mergedCount: merged, try NotificationFrame.decodeFields(messageType, &body))
        case .retained:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            frame = .retained(requestID: requestID, try NotificationFrame.decodeFields(messageType, &body))
        case .queryResult:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            frame = .queryResult(requestID: requestID, json: try body.readWirePayload(messageType, "json"))
        case .queryResultPart:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            frame = .queryResultPart(requestID: requestID, json: try body.readWirePayload(messageType, "json"))
        case .stateChanged:
            frame = .stateChanged(try StateChangedFrame.decodeFields(messageType, &body))
        case .error:
            let requestID: UInt32 = try body.readWireInteger(messageType, "request_id")
            let code: UInt16 = try body.readWireInteger(messageType, "code")
            let flags: UInt8 = try body.readWireInteger(messageType, "flags")
            let message = try body.readWireString(messageType, "message")
            frame = .error(
                ErrorFrame(requestID: requestID, rawCode: code, closesConnection: flags & 1 != 0, message: message))
        case .goodbye:
            let delay: UInt32 = try body.readWireInteger(messageType, "reconnect_after_ms")
            let reason = try body.readWireString(messageType, "reason")
            frame = .goodbye(GoodbyeFrame(reconnectAfterMilliseconds: delay, reason: reason))
        case .hello, .subscribe, .unsubscribe, .post, .ping, .setState, .getState, .suspend, .resume, .query:
            throw WireDecodingError.unknownMessageType(type)
        }
        try body.ensureFullyRead(messageType)
        return frame
    }
}

extension ServerFrame {
    /// The longest JSON document a `QUERY_RESULT` or `QUERY_RESULT_PART` carries within `maxFrameLength`: the
    /// frame's type byte, request id and the JSON's length field come first.
    package static func maxQueryJSONLength(maxFrameLength: UInt32) -> Int {
        Int(maxFrameLength) - 1 - 4 - 4
    }
}
