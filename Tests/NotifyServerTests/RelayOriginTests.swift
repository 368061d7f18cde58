import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Relayed posts (PROTOCOL.md § 16): the origin reaches the connections that asked for it, and only those.
@Suite("Relayed posts and their origin")
struct RelayOriginTests {
    static let origin = RelayOrigin(host: "web-1", uid: 1_000, gid: 100, pid: 4_242, sequence: 77)

    private func helloAskingForOrigins(_ peer: EmbeddedPeer) throws {
        try peer.send(.hello(ClientFrame.Hello(flags: HelloFlags.origins, clientName: peer.name)))
        let frames = try peer.received()
        guard frames.count == 1, case .welcome = frames[0] else {
            throw TestFailure("expected WELCOME, got \(frames.map(\.summary))")
        }
    }

    private func relayedPost(
        _ name: String, _ text: String, requestID: UInt32 = 0x8000_0001, origin: RelayOrigin = Self.origin
    ) -> ClientFrame {
        .post(ClientFrame.Post(requestID: requestID, name: name, payload: ByteBuffer(string: text), origin: origin))
    }

    @Test("a connection that asked gets the origin after the payload; the others a plain NOTIFICATION of the same post")
    func originOnlyToThoseWhoAsked() throws {
        let daemon = EmbeddedBroker()
        let aware = try daemon.connect("aware")
        try helloAskingForOrigins(aware)
        try aware.subscribe("org.example.>", id: 1)
        let plain = try daemon.connect("plain")
        try plain.hello()
        try plain.subscribe("org.example.>", id: 1)
        let relay = try daemon.connect("relay")
        try relay.hello()

        try relay.send(relayedPost("org.example.config", "v2"))
        let withOrigin = try aware.received()
        let without = try plain.received()
        guard case .notification(let a) = withOrigin.first, case .notification(let b) = without.first else {
            Issue.record("expected one NOTIFICATION each: \(withOrigin.map(\.summary)) / \(without.map(\.summary))")
            return
        }
        #expect(a.origin == Self.origin)
        #expect(b.origin == nil, "a client that did not ask never sees the extra field")
        #expect(a.sequence == b.sequence && a.name == b.name && a.payload == b.payload && a.sender == b.sender)

        // A local post is plain for everyone, the aware connection included.
        try relay.send(.post(ClientFrame.Post(requestID: 0x8000_0002, name: "org.example.local", payload: ByteBuffer())))
        guard case .notification(let local) = try aware.received().first else {
            Issue.record("no local notification")
            return
        }
        #expect(local.origin == nil)
    }

    @Test("coalesced while suspended: NOTIFICATION_MERGED carries the latest post's origin")
    func mergedKeepsOrigin() throws {
        let daemon = EmbeddedBroker()
        let aware = try daemon.connect("aware")
        try helloAskingForOrigins(aware)
        try aware.subscribe("org.example.>", id: 1)
        try aware.send(.suspend(requestID: 5))
        #expect(try aware.received().map(\.summary) == [ServerFrame.ok(requestID: 5).summary])
        let relay = try daemon.connect("relay")
        try relay.hello()
        var later = Self.origin
        later.host = "web-2"
        later.sequence = 78
        try relay.send(relayedPost("org.example.x", "1"), relayedPost("org.example.x", "2", origin: later))
        _ = try relay.received()
        try aware.send(.resume(requestID: 6))
        let frames = try aware.received()
        guard frames.count == 2, case .notificationMerged(1, let merged) = frames[1] else {
            Issue.record("expected OK then NOTIFICATION_MERGED: \(frames.map(\.summary))")
            return
        }
        #expect(merged.origin == later, "the latest post's origin, as its payload")
        #expect(String(buffer: merged.payload) == "2")
    }

    @Test("a POST whose origin flag has no origin field, or an empty origin host, is a fatal malformed-frame")
    func malformedOrigin() throws {
        for (label, tail) in [("missing", [UInt8]()), ("empty host", [0, 0] + [UInt8](repeating: 0, count: 20))] {
            let daemon = EmbeddedBroker()
            let relay = try daemon.connect("relay")
            try relay.hello()
            // POST: request_id, flags = origin, name "a", empty payload, then the origin field (or not).
            var body: [UInt8] = [0x04, 0, 0, 0, 1, 0x04, 0, 1, UInt8(ascii: "a"), 0, 0, 0, 0] + tail
            body = withUnsafeBytes(of: UInt32(body.count).bigEndian, Array.init) + body
            try relay.sendRaw(body)
            let frames = try relay.received()
            guard case .error(let error) = frames.first else {
                Issue.record("\(label): expected ERROR, got \(frames.map(\.summary))")
                continue
            }
            #expect(error.code == .malformedFrame, "\(label): \(error)")
            #expect(error.closesConnection, "\(label)")
        }
    }

    @Test("a connection that asked for no echo never gets its own posts back (runs and acknowledged posts); others do")
    func noEcho() throws {
        let daemon = EmbeddedBroker()
        let relay = try daemon.connect("relay")
        try relay.send(.hello(ClientFrame.Hello(flags: HelloFlags.noEcho | HelloFlags.origins, clientName: "relay")))
        _ = try relay.received()
        try relay.subscribe("org.>", id: 1)
        let echoing = try daemon.connect("echoing")
        try echoing.hello()
        try echoing.subscribe("org.>", id: 1)

        // A run of fire-and-forget posts, an acknowledged one and a relayed one, from each.
        for peer in [relay, echoing] {
            try peer.send(
                .post(ClientFrame.Post(requestID: 0x8000_0001, name: "org.a", payload: ByteBuffer(string: peer.name))),
                .post(ClientFrame.Post(requestID: 0x8000_0002, name: "org.a", payload: ByteBuffer(string: peer.name))),
                .post(ClientFrame.Post(requestID: 7, flags: .ackWanted, name: "org.b", payload: ByteBuffer(string: peer.name))),
                relayedPost("org.c", peer.name))
        }
        func payloads(_ frames: [ServerFrame]) -> [String] {
            frames.compactMap { if case .notification(let n) = $0 { String(buffer: n.payload) } else { nil } }
        }
        let toRelay = try relay.received()
        let toEchoing = try echoing.received()
        #expect(payloads(toRelay) == ["echoing", "echoing", "echoing", "echoing"], "none of its own: \(toRelay.map(\.summary))")
        #expect(payloads(toEchoing) == ["relay", "relay", "relay", "relay", "echoing", "echoing", "echoing", "echoing"])
        #expect(toRelay.contains { if case .posted(7, _, 1) = $0 { true } else { false } }, "delivered to the other one only")
    }

    @Test("a relayed post whose NOTIFICATION_MERGED would pass the frame limit with its origin is refused, not fatal")
    func relayedPostNearTheFrameLimit() throws {
        // Tight limits, as a configuration may set them: the longest notification exactly fills a frame.
        let limits = ServerLimits(
            maxNameLength: 1, maxPayloadLength: 66_520, maxFrameLength: 66_560, maxSubscriptions: 100)
        #expect(limits.inconsistencies.isEmpty)
        let daemon = EmbeddedBroker { $0.limits = limits }
        let relay = try daemon.connect("relay")
        try relay.hello()
        // NOTIFICATION_MERGED with the origin is 35 + name + payload + origin bytes after its length: the largest
        // payload it fits is accepted, one byte more is refused (the POST itself would still fit).
        let largest = 66_560 - 35 - 1 - Self.origin.encodedLength
        try relay.send(
            .post(
                ClientFrame.Post(
                    requestID: 8, flags: .ackWanted, name: "a", payload: ByteBuffer(repeating: 0, count: largest),
                    origin: Self.origin)))
        #expect(try relay.received().map(\.summary) == [ServerFrame.posted(requestID: 8, sequence: 1, deliveredCount: 0).summary])
        let payload = largest + 1
        try relay.send(
            .post(
                ClientFrame.Post(
                    requestID: 9, flags: .ackWanted, name: "a", payload: ByteBuffer(repeating: 0, count: payload),
                    origin: Self.origin)))
        guard case .error(let error) = try relay.received().first else {
            Issue.record("expected ERROR")
            return
        }
        #expect(error.code == .payloadTooLarge && !error.closesConnection, "\(error)")
        // Without its origin the same post is fine.
        try relay.send(
            .post(ClientFrame.Post(requestID: 10, flags: .ackWanted, name: "a", payload: ByteBuffer(repeating: 0, count: payload))))
        #expect(try relay.received().map(\.summary) == [ServerFrame.posted(requestID: 10, sequence: 2, deliveredCount: 0).summary])
    }
}
