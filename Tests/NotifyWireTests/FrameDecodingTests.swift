import NIOCore
import NotifyWire
import Testing

@Suite("Frame decoding")
struct FrameDecodingTests {
    /// One or more frames of every client type, with edge values.
    static let clientFrames: [ClientFrame] = [
        .hello(.init(clientName: "notifyctl")),
        .hello(.init(version: .max, flags: .max, clientName: "")),
        .hello(.init(clientName: "nul\u{0}inside")),
        .subscribe(.init(requestID: 0, subscriptionID: 0, pattern: "")),
        .subscribe(
            .init(
                requestID: .max, subscriptionID: .max, flags: .sendRetained, policy: .queue(limit: .max),
                pattern: "日本.東京")),
        .subscribe(.init(requestID: 3, subscriptionID: 4, policy: .disconnect, pattern: ">")),
        // Fields the daemon rejects as a request (invalid-request, unsupported-flags) still decode.
        .subscribe(.init(requestID: 5, subscriptionID: 6, flags: SubscribeFlags(rawValue: 0xFF), policyCode: 0xFF, queueLimit: 1, pattern: "x")),
        .unsubscribe(requestID: 1, subscriptionID: .max),
        .post(.init(requestID: 1, flags: [], name: "x", payload: ByteBuffer())),
        .post(.init(requestID: 2, flags: PostFlags(rawValue: 0xFB), name: "x", payload: ByteBuffer(bytes: [0, 0xFF]))),
        // Every flag: the origin flag (0x04) brings its field after the payload (PROTOCOL.md § 16).
        .post(
            .init(
                requestID: 3, flags: PostFlags(rawValue: 0xFF), name: "x", payload: ByteBuffer(bytes: [1]),
                origin: RelayOrigin(host: "h", uid: 1, gid: 2, pid: 3, sequence: 4))),
        .ping(requestID: 0),
        .ping(requestID: .max),
        .setState(requestID: 1, name: "a.b", value: 0),
        .setState(requestID: .max, name: "", value: .max),
        .getState(requestID: 2, name: "a.b"),
        .getState(requestID: 0, name: ""),
        .suspend(requestID: 0),
        .suspend(requestID: .max),
        .resume(requestID: 1),
        .query(requestID: 3, kind: QueryKind.status.rawValue, argument: ""),
        .query(requestID: 4, kind: 0xFF, argument: "org.*.x"),
    ]

    static let serverFrames: [ServerFrame] = [
        .welcome(
            .init(
                version: 1, daemonPID: .max, instanceID: InstanceID(high: .max, low: 0),
                limits: ServerLimits(maxNameLength: 0, maxPayloadLength: .max, maxFrameLength: 0, maxSubscriptions: .max),
                serverName: "")),
        .ok(requestID: .max),
        .posted(requestID: 0, sequence: 0, deliveredCount: 0),
        .posted(requestID: .max, sequence: .max, deliveredCount: .max),
        .pong(requestID: 12),
        .notification(
            .init(
                sequence: 1, sender: SenderCredentials(pid: 0, uid: 0, gid: 0), name: "", payload: ByteBuffer())),
        .overflow(subscriptionID: .max, droppedCount: .max),
        .overflow(subscriptionID: 0, droppedCount: 1),
        .state(requestID: 1, value: 0),
        .state(requestID: .max, value: .max),
        .state(requestID: 2, value: nil),
        .notificationMerged(
            mergedCount: .max,
            .init(sequence: .max, sender: SenderCredentials(pid: 1, uid: 2, gid: 3), name: "a", payload: ByteBuffer(bytes: [1]))),
        .retained(
            requestID: .max,
            .init(sequence: 1, sender: SenderCredentials(pid: 0, uid: 0, gid: 0), name: "", payload: ByteBuffer())),
        .queryResult(requestID: 0, json: ByteBuffer()),
        .queryResult(requestID: 7, json: ByteBuffer(string: "[]")),
        .error(ErrorFrame(requestID: 0, rawCode: 0, closesConnection: true, message: "")),
        .error(ErrorFrame(requestID: 5, code: .payloadTooLarge, message: "ünïcödé")),
    ]

    @Test("every client frame round-trips")
    func clientRoundTrip() {
        for frame in Self.clientFrames {
            let bytes = frame.encodedBytes
            #expect(Array(bytes.prefix(4)) == lengthPrefix(bytes.count - 4))
            #expect(bytes[4] == frame.messageType.rawValue)
            let decoded = decodeOne(bytes, as: ClientFrame.self)
            #expect(decoded.frame == frame)
            #expect(decoded.remaining == 0)
        }
    }

    @Test("every server frame round-trips")
    func serverRoundTrip() {
        for frame in Self.serverFrames {
            let bytes = frame.encodedBytes
            #expect(Array(bytes.prefix(4)) == lengthPrefix(bytes.count - 4))
            #expect(bytes[4] == frame.messageType.rawValue)
            let decoded = decodeOne(bytes, as: ServerFrame.self)
            #expect(decoded.frame == frame)
            #expect(decoded.remaining == 0)
        }
    }

    @Test("fixed frame sizes match the specification's tables")
    func frameSizes() {
        // Total bytes on the wire, from PROTOCOL.md § 6 and § 7 (n = string bytes, p = payload bytes).
        #expect(ClientFrame.hello(.init(clientName: "abc")).encodedBytes.count == 13 + 3)
        #expect(ClientFrame.subscribe(.init(requestID: 1, subscriptionID: 1, pattern: "abc")).encodedBytes.count == 21 + 3)
        #expect(ClientFrame.unsubscribe(requestID: 1, subscriptionID: 1).encodedBytes.count == 13)
        #expect(
            ClientFrame.post(.init(requestID: 1, name: "abc", payload: ByteBuffer(string: "12345"))).encodedBytes.count
                == 16 + 3 + 5)
        #expect(ClientFrame.ping(requestID: 1).encodedBytes.count == 9)
        #expect(ClientFrame.setState(requestID: 1, name: "abc", value: 1).encodedBytes.count == 19 + 3)
        #expect(ClientFrame.getState(requestID: 1, name: "abc").encodedBytes.count == 11 + 3)
        #expect(ClientFrame.suspend(requestID: 1).encodedBytes.count == 9)
        #expect(ClientFrame.resume(requestID: 1).encodedBytes.count == 9)
        #expect(ClientFrame.query(requestID: 1, kind: 2, argument: "abc").encodedBytes.count == 12 + 3)
        #expect(
            ServerFrame.welcome(
                .init(daemonPID: 1, instanceID: InstanceID(high: 0, low: 0), limits: .default, serverName: "abc")
            ).encodedBytes.count == 43 + 3)
        #expect(ServerFrame.ok(requestID: 1).encodedBytes.count == 9)
        #expect(ServerFrame.posted(requestID: 1, sequence: 1, deliveredCount: 1).encodedBytes.count == 21)
        #expect(ServerFrame.pong(requestID: 1).encodedBytes.count == 9)
        #expect(ServerFrame.overflow(subscriptionID: 1, droppedCount: 1).encodedBytes.count == 17)
        #expect(ServerFrame.state(requestID: 1, value: 1).encodedBytes.count == 18)
        #expect(ServerFrame.state(requestID: 1, value: nil).encodedBytes.count == 18)
        let fields = NotificationFrame(
            sequence: 1, sender: SenderCredentials(pid: 1, uid: 1, gid: 1), name: "abc", payload: ByteBuffer(string: "12345"))
        #expect(ServerFrame.notification(fields).encodedBytes.count == 31 + 3 + 5)
        #expect(ServerFrame.notificationMerged(mergedCount: 1, fields).encodedBytes.count == 39 + 3 + 5)
        #expect(ServerFrame.retained(requestID: 1, fields).encodedBytes.count == 35 + 3 + 5)
        #expect(ServerFrame.queryResult(requestID: 1, json: ByteBuffer(string: "12345")).encodedBytes.count == 13 + 5)
        #expect(ServerFrame.error(ErrorFrame(requestID: 1, code: .invalidName, message: "abc")).encodedBytes.count == 14 + 3)
    }

    @Test("incomplete input waits and consumes nothing")
    func incomplete() {
        let bytes = ClientFrame.ping(requestID: 3).encodedBytes
        for count in 0..<bytes.count {
            let result = decodeOne(Array(bytes.prefix(count)), as: ClientFrame.self)
            #expect(result.frame == nil, "\(count) bytes")
            #expect(result.error == nil, "\(count) bytes")
            #expect(result.remaining == count, "\(count) bytes")
        }
    }

    @Test("decodeFrame takes one frame and leaves the next")
    func leavesFollowingBytes() throws {
        let first = ClientFrame.ping(requestID: 1).encodedBytes
        let second = ClientFrame.ping(requestID: 2).encodedBytes
        var buffer = ByteBuffer(bytes: first + second.prefix(3))
        #expect(try ClientFrame.decodeFrame(from: &buffer, maxFrameLength: 100) == .ping(requestID: 1))
        #expect(buffer.readableBytes == 3)
        #expect(try ClientFrame.decodeFrame(from: &buffer, maxFrameLength: 100) == nil)
        #expect(buffer.readableBytes == 3)
    }

    @Test("a frame of exactly max_frame_length is accepted, one byte more is not")
    func lengthBoundary() {
        let limit = ProtocolConstants.minimumMaxFrameLength
        let name = "org.example.big"
        // POST length = 12 + n + p.
        let payloadLength = Int(limit) - 12 - name.utf8.count
        let atLimit = ClientFrame.post(
            .init(requestID: 1, name: name, payload: ByteBuffer(bytes: Array(repeating: 7, count: payloadLength))))
        let bytes = atLimit.encodedBytes
        #expect(bytes.count == Int(limit) + 4)
        #expect(decodeOne(bytes, as: ClientFrame.self, maxFrameLength: limit).frame == atLimit)
        let over = ClientFrame.post(
            .init(requestID: 1, name: name, payload: ByteBuffer(bytes: Array(repeating: 7, count: payloadLength + 1))))
        #expect(
            decodeOne(over.encodedBytes, as: ClientFrame.self, maxFrameLength: limit).error
                == .frameTooLarge(length: limit + 1, limit: limit))
        #expect(
            decodeOne([0xFF, 0xFF, 0xFF, 0xFF], as: ServerFrame.self, maxFrameLength: limit).error
                == .frameTooLarge(length: .max, limit: limit))
    }

    @Test("each type byte is accepted only in its own direction")
    func typeBytes() {
        // A frame of length 1: just a type byte, no fields.
        for type in UInt8.min...UInt8.max {
            let bytes: [UInt8] = [0, 0, 0, 1, type]
            let client = decodeOne(bytes, as: ClientFrame.self).error
            let server = decodeOne(bytes, as: ServerFrame.self).error
            switch type {
            case 0x01...0x0A:
                // A client type: the daemon reads its (missing) first field; a client refuses the type.
                #expect(client?.code == .malformedFrame, "0x\(String(type, radix: 16))")
                #expect(server == .unknownMessageType(type))
            case 0x81...0x8D, 0x8F:
                #expect(client == .unknownMessageType(type))
                #expect(server?.code == .malformedFrame, "0x\(String(type, radix: 16))")
            default:
                #expect(client == .unknownMessageType(type))
                #expect(server == .unknownMessageType(type))
            }
        }
    }

    @Test("a frame cut short anywhere inside its fields is malformed")
    func truncatedAnywhere() throws {
        let frames: [[UInt8]] =
            Self.clientFrames.map(\.encodedBytes) + Self.serverFrames.map(\.encodedBytes)
            + (try GoldenVectors.valid.keys.sorted().map { try VectorFile.load($0).bytes })
        for full in frames {
            let type = full[4]
            let isClient = type < 0x80
            for bodyLength in 1..<(full.count - 4) {
                let cut = lengthPrefix(bodyLength) + full[4..<(4 + bodyLength)]
                let error =
                    isClient
                    ? decodeOne(cut, as: ClientFrame.self).error : decodeOne(cut, as: ServerFrame.self).error
                guard case .truncatedField(let message, _)? = error else {
                    Issue.record("type 0x\(String(type, radix: 16)) cut to \(bodyLength): \(String(describing: error))")
                    continue
                }
                #expect(message.rawValue == type)
            }
        }
    }

    @Test("bytes after the last field are malformed")
    func trailingBytes() {
        let frames: [[UInt8]] = Self.clientFrames.map(\.encodedBytes) + Self.serverFrames.map(\.encodedBytes)
        for full in frames {
            for extra in [[UInt8(0)], [0xFF, 0xFF, 0xFF]] {
                let padded = lengthPrefix(full.count - 4 + extra.count) + full[4...] + extra
                let message = MessageType(rawValue: full[4])!
                // After a notification's payload only an origin field may follow (PROTOCOL.md § 16): these bytes are
                // read as one and found cut short. Malformed all the same.
                let carriesOrigin = [MessageType.notification, .notificationMerged, .retained].contains(message)
                let expected =
                    carriesOrigin
                    ? WireDecodingError.truncatedField(message: message, field: "origin_host")
                    : WireDecodingError.trailingBytes(message: message, count: extra.count)
                let error =
                    full[4] < 0x80
                    ? decodeOne(padded, as: ClientFrame.self).error : decodeOne(padded, as: ServerFrame.self).error
                #expect(error == expected)
            }
        }
    }

    static let invalidUTF8Sequences: [[UInt8]] = [
        [0x80],  // stray continuation byte
        [0xBF],
        [0xC3],  // sequence cut short by the end of the string
        [0xE2, 0x82],
        [0xF0, 0x9F, 0x98],
        [0xC3, 0x28],  // bad continuation
        [0xC0, 0xAE],  // overlong '.'
        [0xC1, 0xBF],
        [0xE0, 0x80, 0xAF],  // overlong '/'
        [0xF0, 0x80, 0x80, 0xAF],
        [0xED, 0xA0, 0x80],  // surrogates
        [0xED, 0xBF, 0xBF],
        [0xF4, 0x90, 0x80, 0x80],  // above U+10FFFF
        [0xF5, 0x80, 0x80, 0x80],
        [0xFE],
        [0xFF],
    ]

    @Test("invalid UTF-8 in any string field is malformed", arguments: invalidUTF8Sequences)
    func invalidUTF8(sequence: [UInt8]) {
        func string(_ bytes: [UInt8]) -> [UInt8] { lengthPrefix(bytes.count).suffix(2) + bytes }
        let bad = [0x61] + sequence + [0x62]  // "a" … "b"
        // HELLO client_name
        let hello: [UInt8] = [0x01, 0x00, 0x01, 0, 0, 0, 0] + string(bad)
        #expect(
            decodeOne(lengthPrefix(hello.count) + hello, as: ClientFrame.self).error
                == .invalidUTF8(message: .hello, field: "client_name"))
        // SUBSCRIBE pattern
        let subscribe: [UInt8] = [0x02, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0] + string(bad)
        #expect(
            decodeOne(lengthPrefix(subscribe.count) + subscribe, as: ClientFrame.self).error
                == .invalidUTF8(message: .subscribe, field: "pattern"))
        // SET_STATE and GET_STATE name, QUERY argument
        let setState: [UInt8] = [0x06, 0, 0, 0, 1] + Array(repeating: 0, count: 8) + string(bad)
        #expect(
            decodeOne(lengthPrefix(setState.count) + setState, as: ClientFrame.self).error
                == .invalidUTF8(message: .setState, field: "name"))
        let getState: [UInt8] = [0x07, 0, 0, 0, 1] + string(bad)
        #expect(
            decodeOne(lengthPrefix(getState.count) + getState, as: ClientFrame.self).error
                == .invalidUTF8(message: .getState, field: "name"))
        let query: [UInt8] = [0x0A, 0, 0, 0, 1, 2] + string(bad)
        #expect(
            decodeOne(lengthPrefix(query.count) + query, as: ClientFrame.self).error
                == .invalidUTF8(message: .query, field: "argument"))
        // RETAINED and NOTIFICATION_MERGED name
        let retained: [UInt8] = [0x8A] + Array(repeating: 0, count: 24) + string(bad) + [0, 0, 0, 0]
        #expect(
            decodeOne(lengthPrefix(retained.count) + retained, as: ServerFrame.self).error
                == .invalidUTF8(message: .retained, field: "name"))
        let merged: [UInt8] = [0x89] + Array(repeating: 0, count: 28) + string(bad) + [0, 0, 0, 0]
        #expect(
            decodeOne(lengthPrefix(merged.count) + merged, as: ServerFrame.self).error
                == .invalidUTF8(message: .notificationMerged, field: "name"))
        // POST name
        let post: [UInt8] = [0x04, 0, 0, 0, 1, 0] + string(bad) + [0, 0, 0, 0]
        #expect(
            decodeOne(lengthPrefix(post.count) + post, as: ClientFrame.self).error
                == .invalidUTF8(message: .post, field: "name"))
        // NOTIFICATION name
        let notification: [UInt8] = [0x85] + Array(repeating: 0, count: 20) + string(bad) + [0, 0, 0, 0]
        #expect(
            decodeOne(lengthPrefix(notification.count) + notification, as: ServerFrame.self).error
                == .invalidUTF8(message: .notification, field: "name"))
        // ERROR message
        let error: [UInt8] = [0x8F, 0, 0, 0, 0, 0, 1, 1] + string(bad)
        #expect(
            decodeOne(lengthPrefix(error.count) + error, as: ServerFrame.self).error
                == .invalidUTF8(message: .error, field: "message"))
        // WELCOME server_name
        let welcome: [UInt8] = [0x81, 0, 1] + Array(repeating: 0, count: 34) + string(bad)
        #expect(
            decodeOne(lengthPrefix(welcome.count) + welcome, as: ServerFrame.self).error
                == .invalidUTF8(message: .welcome, field: "server_name"))
    }

    @Test("a multi-byte character may not straddle the end of a string")
    func characterStraddlingStringEnd() {
        // Name "aé" is 3 bytes; announce 2 so the string ends after the first byte of é, and let the
        // second byte of é be the first byte of the payload length.
        let post: [UInt8] = [0x04, 0, 0, 0, 1, 0, 0x00, 0x02, 0x61, 0xC3, 0xA9, 0, 0, 0]
        #expect(
            decodeOne(lengthPrefix(post.count) + post, as: ClientFrame.self).error
                == .invalidUTF8(message: .post, field: "name"))
    }

    @Test("valid but unusual strings decode")
    func unusualStrings() {
        for name in ["", "\u{0}", "\u{FEFF}", "\u{10FFFF}", "😀", "e\u{301}"] {
            let frame = ClientFrame.hello(.init(clientName: name))
            #expect(decodeOne(frame.encodedBytes, as: ClientFrame.self).frame == frame, "\(name.unicodeScalars.map(\.value))")
        }
    }
}
