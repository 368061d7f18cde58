import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Bad input that the daemon must answer with a fatal `ERROR` and then close that connection.
struct FatalInput: Sendable, CustomTestStringConvertible {
    var label: String
    /// Whether the client completes the handshake before sending `bytes`.
    var handshakeFirst: Bool
    var bytes: [UInt8]
    /// Whether the client shuts down its sending side after `bytes`.
    var shutdownWrite = false
    var code: ErrorCode

    var testDescription: String { label }

    static let all: [FatalInput] = [
        FatalInput(
            label: "SUBSCRIBE before HELLO", handshakeFirst: false,
            bytes: WireBytes.encode(.testSubscribe(requestID: 5, subscriptionID: 1, name: "org.example")),
            code: .handshakeRequired),
        FatalInput(
            label: "PING before HELLO", handshakeFirst: false, bytes: WireBytes.encode(.ping(requestID: 9)),
            code: .handshakeRequired),
        FatalInput(
            label: "HELLO version 2 (with a pipelined PING, discarded)", handshakeFirst: false,
            bytes: WireBytes.hello(version: 2) + WireBytes.encode(.ping(requestID: 1)), code: .unsupportedVersion),
        FatalInput(
            label: "HELLO version 0", handshakeFirst: false, bytes: WireBytes.hello(version: 0),
            code: .unsupportedVersion),
        FatalInput(label: "second HELLO", handshakeFirst: true, bytes: WireBytes.hello(), code: .unexpectedHello),
        FatalInput(
            label: "undefined message type 0x42", handshakeFirst: true,
            bytes: WireBytes.frame(type: 0x42, WireBytes.u32(1)), code: .unknownMessageType),
        FatalInput(
            label: "undefined message type 0x00 as the first frame", handshakeFirst: false,
            bytes: WireBytes.frame(type: 0x00, []), code: .unknownMessageType),
        FatalInput(
            label: "daemon-to-client type OK (0x82) sent by a client", handshakeFirst: true,
            bytes: WireBytes.frame(type: 0x82, WireBytes.u32(1)), code: .unknownMessageType),
        FatalInput(
            label: "daemon-to-client type ERROR (0x8F) sent by a client", handshakeFirst: true,
            bytes: WireBytes.frame(type: 0x8F, WireBytes.u32(0) + WireBytes.u16(1) + [1] + WireBytes.string("x")),
            code: .unknownMessageType),
        FatalInput(label: "zero length prefix", handshakeFirst: true, bytes: WireBytes.u32(0), code: .frameTooLarge),
        FatalInput(
            label: "zero length prefix before HELLO", handshakeFirst: false, bytes: WireBytes.u32(0),
            code: .frameTooLarge),
        FatalInput(
            label: "length max_frame_length + 1 (prefix only)", handshakeFirst: true,
            bytes: WireBytes.u32(ServerLimits.default.maxFrameLength + 1), code: .frameTooLarge),
        FatalInput(
            label: "length 0xFFFFFFFF before HELLO", handshakeFirst: false, bytes: WireBytes.u32(.max),
            code: .frameTooLarge),
        FatalInput(
            label: "SUBSCRIBE name field runs past the frame", handshakeFirst: true,
            bytes: WireBytes.frame(
                type: 0x02, WireBytes.subscribeFields(requestID: 1, subscriptionID: 1) + WireBytes.u16(10) + Array("abc".utf8)),
            code: .malformedFrame),
        FatalInput(
            label: "PING request id truncated", handshakeFirst: true, bytes: WireBytes.frame(type: 0x05, [0, 0]),
            code: .malformedFrame),
        FatalInput(
            label: "trailing byte after PING", handshakeFirst: true,
            bytes: WireBytes.frame(type: 0x05, WireBytes.u32(1) + [0]), code: .malformedFrame),
        FatalInput(
            label: "trailing bytes after POST payload", handshakeFirst: true,
            bytes: WireBytes.frame(
                type: 0x04, WireBytes.u32(1) + [1] + WireBytes.string("org.example") + WireBytes.u32(1) + [7, 0, 0]),
            code: .malformedFrame),
        FatalInput(
            label: "overlong UTF-8 in SUBSCRIBE name", handshakeFirst: true,
            bytes: WireBytes.frame(
                type: 0x02, WireBytes.subscribeFields(requestID: 1, subscriptionID: 1) + WireBytes.string([0x61, 0xC0, 0xAE])),
            code: .malformedFrame),
        FatalInput(
            label: "UTF-8 surrogate in POST name", handshakeFirst: true,
            bytes: WireBytes.frame(type: 0x04, WireBytes.u32(1) + [1] + WireBytes.string([0x61, 0xED, 0xA0, 0x80]) + WireBytes.u32(0)),
            code: .malformedFrame),
        FatalInput(
            label: "invalid UTF-8 in HELLO client name", handshakeFirst: false,
            bytes: WireBytes.frame(type: 0x01, WireBytes.u16(1) + WireBytes.u32(0) + WireBytes.string([0xFF])),
            code: .malformedFrame),
        FatalInput(
            label: "half a length prefix, then SHUT_WR", handshakeFirst: true, bytes: [0, 0], shutdownWrite: true,
            code: .malformedFrame),
        FatalInput(
            label: "part of a SUBSCRIBE frame, then SHUT_WR", handshakeFirst: true,
            bytes: Array(WireBytes.encode(.testSubscribe(requestID: 1, subscriptionID: 1, name: "org.example")).prefix(9)),
            shutdownWrite: true, code: .malformedFrame),
        FatalInput(
            label: "HELLO cut short, then SHUT_WR", handshakeFirst: false, bytes: Array(WireBytes.hello().prefix(7)),
            shutdownWrite: true, code: .malformedFrame),
    ]
}

/// A name as a test argument, shown shortened in test output.
struct TestName: Sendable, CustomTestStringConvertible {
    var name: String

    init(_ name: String) {
        self.name = name
    }

    var testDescription: String {
        let shown = name.utf8.count > 40 ? String(name.prefix(24)) + "…" : name
        return "\(shown.debugDescription) (\(name.utf8.count) bytes)"
    }
}

@Suite("Protocol errors", .timeLimit(.minutes(TestScale.minutes(2))))
struct ProtocolErrorTests {
    @Test("Fatal bad input: ERROR (request id 0, closing flag), then EOF; other connections keep working",
          arguments: FatalInput.all)
    func fatalInput(_ input: FatalInput) async throws {
        try await withServer { server in
            let bystander = try await server.connect("bystander")
            try await bystander.subscribe("org.example.alive", subscriptionID: 1, requestID: 1)
            let bystandingPoster = try await server.connect("bystanding poster")

            let offender = try await server.connectRaw("offender")
            if input.handshakeFirst { try await offender.hello() }
            try await offender.sendRaw(input.bytes)
            if input.shutdownWrite { try await offender.shutdownOutput() }

            let error = try await offender.nextError()
            #expect(error.code == input.code, "\(error)")
            #expect(error.requestID == 0)
            #expect(error.closesConnection)
            #expect(!error.message.isEmpty)
            #expect(try await offender.expectEnd() == .endOfFile)

            // Only the offending connection was closed.
            #expect(try await server.snapshot().clients.map(\.clientName) == ["bystander", "bystanding poster"])
            #expect(try await bystandingPoster.postAcked("org.example.alive", payload: [1], requestID: 2).deliveredCount == 1)
            #expect(try await bystander.nextNotification().name == "org.example.alive")
            try await bystander.expectQuiet()
            try await bystandingPoster.expectQuiet()
        }
    }

    @Test("A client that shuts down writing after complete frames gets its replies, then EOF")
    func halfCloseAfterCompleteFrames() async throws {
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("org.example.oneshot", subscriptionID: 1, requestID: 1)
            let poster = try await server.connectRaw("one-shot poster")
            try await poster.sendRaw(
                WireBytes.hello(name: "one-shot poster")
                    + WireBytes.encode(.post(ClientFrame.Post(requestID: 3, flags: .ackWanted, name: "org.example.oneshot", payload: ByteBuffer(bytes: [42])))))
            try await poster.shutdownOutput()
            guard case .welcome = try await poster.next() else {
                Issue.record("expected WELCOME first")
                return
            }
            #expect(try await poster.next() == .posted(requestID: 3, sequence: 1, deliveredCount: 1))
            #expect(try await poster.expectEnd() == .endOfFile)
            #expect(try await subscriber.nextNotification().payload == ByteBuffer(bytes: [42]))
        }
    }

    static let invalidNames: [TestName] = [
        TestName(""),
        TestName("org.example.battery low"),
        // `*` and `>` are wildcards in SUBSCRIBE patterns only as whole labels (see wildcardLabelsOnlyInPatterns);
        // inside a label, or `>` before the last label, they are invalid there too.
        TestName("a*b"),
        TestName("a.>.b"),
        TestName("self.cache.flush"),
        TestName(String(repeating: "a", count: 256)),
        TestName(String(repeating: "é", count: 128)),
        TestName(".org.example"),
        TestName("org.example."),
        TestName("org..example"),
        TestName("org/example"),
        TestName("tab\tname"),
        TestName("del\u{7F}"),
        TestName("c1\u{85}"),
        TestName(String(repeating: "a", count: 60_000)),
        TestName("org.example. " + String(repeating: "b", count: 60_000)),
    ]

    @Test("An invalid name in SUBSCRIBE or POST is answered with invalid-name; the connection stays usable",
          arguments: invalidNames)
    func invalidName(_ testName: TestName) async throws {
        let name = testName.name
        try await withServer { server in
            let client = try await server.connect("namer")
            try await client.send(.testSubscribe(requestID: 11, subscriptionID: 1, name: name))
            let subscribeError = try await client.nextError()
            #expect(subscribeError.code == .invalidName)
            #expect(subscribeError.requestID == 11)
            #expect(!subscribeError.closesConnection)
            #expect(subscribeError.message.utf8.count <= ErrorFrame.maxMessageLength)

            for flags: PostFlags in [.ackWanted, []] {
                try await client.send(.post(ClientFrame.Post(requestID: 12, flags: flags, name: name, payload: ByteBuffer())))
                let postError = try await client.nextError()
                #expect(postError.code == .invalidName)
                #expect(postError.requestID == 12)
                #expect(!postError.closesConnection)
            }
            try await client.expectQuiet()

            let snapshot = try await server.snapshot()
            #expect(snapshot.names == 0)
            #expect(snapshot.posts == 0)
            #expect(snapshot.clients.first?.subscriptions == 0)
            // Still usable, and the rejected posts took no sequence number.
            #expect(try await client.postAcked("org.example.valid", requestID: 13) == (1, 0))
        }
    }

    @Test("`*` and `>` as whole labels make a SUBSCRIBE pattern, but a POST name with them is invalid-name",
          arguments: [TestName("org.example.*"), TestName("org.>")])
    func wildcardLabelsOnlyInPatterns(_ testName: TestName) async throws {
        let pattern = testName.name
        try await withServer { server in
            let subscriber = try await server.connect("pattern subscriber")
            try await subscriber.subscribe(pattern, subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")
            for flags: PostFlags in [.ackWanted, []] {
                try await poster.send(.post(ClientFrame.Post(requestID: 12, flags: flags, name: pattern, payload: ByteBuffer())))
                let postError = try await poster.nextError()
                #expect(postError.code == .invalidName)
                #expect(postError.requestID == 12)
                #expect(!postError.closesConnection)
            }
            try await poster.expectQuiet()
            try await subscriber.expectQuiet()
            // The rejected posts took no sequence number; the pattern matches a real name.
            #expect(try await poster.postAcked("org.example.x", requestID: 13) == (1, 1))
            #expect(try await subscriber.nextNotification().name == "org.example.x")
            try await subscriber.expectQuiet()
        }
    }

    @Test("Unusual but valid names are accepted by SUBSCRIBE and POST")
    func unusualValidNames() async throws {
        let names = [
            "self", "Self.x", "myself.x", "org.self.x", "a", "128", "app:ui@main+v2=1", "de.beispiel.größe",
            "日本.東京", "status.😀", String(repeating: "a", count: 255),
        ]
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            let poster = try await server.connect("poster")
            for (index, name) in names.enumerated() {
                try await subscriber.subscribe(name, subscriptionID: UInt32(index), requestID: UInt32(index))
                #expect(try await poster.postAcked(name, requestID: UInt32(index)).deliveredCount == 1, "\(name)")
                #expect(try await subscriber.nextNotification().name == name)
            }
        }
    }

    @Test("A name longer than a lowered max_name_length is invalid")
    func configuredNameLength() async throws {
        try await withServer({ $0.limits.maxNameLength = 10 }) { server in
            let client = try await server.connect("namer")
            try await client.subscribe("abcde.ghij", subscriptionID: 1, requestID: 1)
            try await client.send(.testSubscribe(requestID: 2, subscriptionID: 2, name: "abcde.ghijk"))
            let error = try await client.nextError()
            #expect(error.code == .invalidName)
            #expect(error.requestID == 2)
            try await client.expectQuiet()
        }
    }

    @Test("A payload above max_payload_length is answered with payload-too-large; the connection stays usable")
    func payloadTooLarge() async throws {
        try await withServer({ $0.limits.maxPayloadLength = 1_024 }) { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("org.example.big", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")

            for flags: PostFlags in [.ackWanted, []] {
                try await poster.send(
                    .post(ClientFrame.Post(requestID: 21, flags: flags, name: "org.example.big", payload: counterPayload(1, size: 1_025))))
                let error = try await poster.nextError()
                #expect(error.code == .payloadTooLarge)
                #expect(error.requestID == 21)
                #expect(!error.closesConnection)
            }
            // Checked after the name.
            try await poster.send(
                .post(ClientFrame.Post(requestID: 22, flags: .ackWanted, name: "bad name", payload: counterPayload(1, size: 1_025))))
            #expect(try await poster.nextError().code == .invalidName)
            try await poster.expectQuiet()

            let accepted = try await poster.postAcked("org.example.big", payload: Array(repeating: 9, count: 1_024), requestID: 23)
            #expect(accepted == (1, 1))
            #expect(try await subscriber.nextNotification().payload.readableBytes == 1_024)
            try await subscriber.expectQuiet()
        }
    }

    @Test("A frame of exactly max_frame_length bytes is accepted as a frame (its payload is then too large)")
    func frameOfExactlyMaxLength() async throws {
        try await withServer { server in
            let client = try await server.connect("big-framer")
            let limit = Int(ServerLimits.default.maxFrameLength)
            // length = type (1) + request id (4) + flags (1) + name (2 + 1) + payload (4 + p)
            let payloadSize = limit - 13
            try await client.send(
                .post(ClientFrame.Post(requestID: 31, flags: .ackWanted, name: "a", payload: ByteBuffer(repeating: 0, count: payloadSize))))
            let error = try await client.nextError()
            #expect(error.code == .payloadTooLarge)
            #expect(error.requestID == 31)
            #expect(!error.closesConnection)
            try await client.expectQuiet()
        }
    }

    /// Reserved bits alone (0x08, 0x80), with ack (0x09), with retain (0x0A), and every bit but the origin flag
    /// (0xFB: with 0x04 the frame would need an origin field, § 16).
    @Test("POST with reserved flag bits is answered with unsupported-flags and neither delivered nor retained",
          arguments: [UInt8(0x08), 0x09, 0x0A, 0x80, 0xFB])
    func unsupportedFlags(_ flags: UInt8) async throws {
        try await withServer { server in
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe("org.example.flags", subscriptionID: 1, requestID: 1)
            let poster = try await server.connect("poster")
            try await poster.send(
                .post(ClientFrame.Post(requestID: 41, flags: PostFlags(rawValue: flags), name: "org.example.flags", payload: ByteBuffer())))
            let error = try await poster.nextError()
            #expect(error.code == .unsupportedFlags)
            #expect(error.requestID == 41)
            #expect(!error.closesConnection)
            // Checked before the name.
            try await poster.send(
                .post(ClientFrame.Post(requestID: 42, flags: PostFlags(rawValue: flags), name: "bad name", payload: ByteBuffer())))
            #expect(try await poster.nextError().code == .unsupportedFlags)
            try await poster.expectQuiet()
            try await subscriber.expectQuiet()
            #expect(try await poster.postAcked("org.example.flags", requestID: 43) == (1, 1))
            // Not retained either (0x0A and 0xFB include the retain bit; the accepted post did not ask for it): a
            // subscription asking for retained notifications gets its OK with nothing before it.
            let late = try await server.connect("late subscriber")
            try await late.send(.testSubscribe(requestID: 1, subscriptionID: 1, name: "org.example.flags", flags: .sendRetained))
            let reply = try await late.next()
            #expect(reply == .ok(requestID: 1), "got \(reply.summary)")
            try await late.expectQuiet()
        }
    }
}
