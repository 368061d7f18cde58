import NIOCore
import NIOEmbedded
import Testing

@testable import NotifyNATS

@Suite("NATS client state")
struct NATSClientStateTests {
    private func state() throws -> ClientState {
        ClientState(configuration: .init(servers: [try NATSServerAddress(url: "nats://seed:4222")]))
    }

    @Test("a subscription made after the handshake's SUBs were written, before its PONG, is sent on that connection")
    func subscribeDuringHandshake() throws {
        var state = try state()
        let channel = EmbeddedChannel()
        state.phase = .handshaking(channel, sentConnect: false)
        _ = state.addSubscription(subject: "early", queueGroup: nil) { _ in }
        #expect(state.control.readableBytes == 0, "not yet: the handshake batch will list it")
        #expect(String(buffer: state.handshake(name: "t", echo: true)).contains("SUB early 1\r\n"))
        state.phase = .handshaking(channel, sentConnect: true)
        _ = state.addSubscription(subject: "late", queueGroup: nil) { _ in }
        #expect(String(buffer: state.control) == "SUB late 2\r\n")
        state.removeSubscription(sid: 1)
        #expect(String(buffer: state.control) == "SUB late 2\r\nUNSUB 1\r\n")
    }

    @Test("the pool: the configured servers, those the cluster announces now, then a few it announced before")
    func poolFollowsTheCluster() throws {
        var state = try state()
        state.learn(connectURLs: ["10.0.0.2:4222", "10.0.0.3:4222"])
        #expect(state.pool.map(\.description) == ["seed:4222", "10.0.0.2:4222", "10.0.0.3:4222"])
        state.learn(connectURLs: ["10.0.0.3:4222", "10.0.0.4:4222"])
        #expect(state.pool.map(\.description) == ["seed:4222", "10.0.0.3:4222", "10.0.0.4:4222", "10.0.0.2:4222"])
        state.learn(connectURLs: [])
        #expect(state.pool.count == 4, "an INFO without connect_urls changes nothing")
        // A cluster that keeps changing: departed servers stay bounded.
        for round in 0..<50 { state.learn(connectURLs: ["10.1.\(round).1:4222"]) }
        #expect(state.pool.count == 1 + 1 + ClientState.maxDepartedServers)
        #expect(state.pool[1].description == "10.1.49.1:4222", "the live server comes before the departed ones")
    }

    @Test("a message announced larger than any server sends is refused before it is buffered")
    func hugeMessage() {
        for line in ["MSG a 1 9223372036854775807\r\n", "HMSG a 1 10 9223372036854775807\r\n", "MSG a 1 67108865\r\n"] {
            var buffer = ByteBuffer(string: line)
            #expect(throws: NATSProtocolError.self, "\(line)") { _ = try NATSOperationDecoder.decodeOne(&buffer) }
        }
        var fits = ByteBuffer(string: "MSG a 1 67108864\r\n")
        #expect((try? NATSOperationDecoder.decodeOne(&fits)) == .some(nil), "64 MiB is allowed: wait for its bytes")
    }
}
