import NIOCore
import NotifyWire
import NotifyTestSupport
import Testing

extension Integration {
    /// A client that speaks broken protocol is told why and disconnected; everyone else carries on.
    @Suite("protocol abuse")
    struct ProtocolAbuseTests {
        /// Bytes after a valid HELLO (or instead of it), and the fatal error the daemon must answer with.
        struct Garbage: Sendable, CustomStringConvertible {
            var description: String
            var sendHello: Bool
            var bytes: [UInt8]
            var expectedCode: ErrorCode
        }

        static let garbage: [Garbage] = [
            Garbage(
                description: "unknown message type 0x77", sendHello: true,
                bytes: [0x00, 0x00, 0x00, 0x05, 0x77, 0x01, 0x02, 0x03, 0x04], expectedCode: .unknownMessageType),
            Garbage(
                description: "PING before HELLO", sendHello: false,
                bytes: [0x00, 0x00, 0x00, 0x05, 0x05, 0x00, 0x00, 0x00, 0x01], expectedCode: .handshakeRequired),
            Garbage(
                description: "zero-length frame", sendHello: true, bytes: [0x00, 0x00, 0x00, 0x00],
                expectedCode: .frameTooLarge),
            Garbage(
                description: "frame length 0xFFFFFFFF", sendHello: true, bytes: [0xFF, 0xFF, 0xFF, 0xFF, 0x01],
                expectedCode: .frameTooLarge),
        ]

        @Test("garbage gets a fatal ERROR and EOF; subscribed observers keep working")
        func garbageClient() async throws {
            try await withDaemon { scope, _ in
                let name = "garbage.test"
                let listen = try scope.launch(.notifyctl, ["listen", name, "--count", "1", "--socket", scope.socketPath])
                let peer = try scope.launch(
                    .testPeer, ["observe", "--socket", scope.socketPath, "--name", name, "--count", "1", "--target", "immediate"])
                try await listen.waitForLine(containing: "listening", on: .stderr)
                try await peer.waitForLine(containing: "ready", on: .stdout)

                for garbage in Self.garbage {
                    let frames = try await Self.exchange(garbage, socketPath: scope.socketPath)
                    let expectedCount = garbage.sendHello ? 2 : 1
                    try #require(
                        frames.count == expectedCount,
                        "\(garbage): expected \(garbage.sendHello ? "WELCOME then " : "")ERROR, got \(frames)")
                    if garbage.sendHello {
                        guard case .welcome(let welcome) = frames[0] else {
                            Issue.record("\(garbage): first frame is not WELCOME: \(frames[0])")
                            continue
                        }
                        #expect(welcome.version == ProtocolConstants.version)
                    }
                    guard case .error(let error) = frames[expectedCount - 1] else {
                        Issue.record("\(garbage): last frame is not ERROR: \(frames[expectedCount - 1])")
                        continue
                    }
                    #expect(error.code == garbage.expectedCode, "\(garbage): \(error)")
                    #expect(error.closesConnection, "\(garbage): the ERROR frame must announce the close: \(error)")
                    #expect(error.requestID == ProtocolConstants.noRequest, "\(garbage): \(error)")
                    #expect(!error.message.isEmpty, "\(garbage): the ERROR frame should explain itself")
                }

                // The daemon and the other clients are unaffected.
                let post = try await scope.run(
                    .notifyctl, ["post", name, "still-alive", "--wait", "--socket", scope.socketPath])
                #expect(post.termination == .exited(0), "\(post.diagnostics)")
                #expect(try deliveredCount(fromPostOutput: post.stdoutLines) == 2, "\(post.diagnostics)")

                let listenEnd = try await listen.waitForExit()
                #expect(listenEnd == .exited(0), "\(listen.diagnostics)")
                #expect(listen.stdoutLines.first?.hasSuffix(" still-alive") == true, "\(listen.diagnostics)")
                let peerEnd = try await peer.waitForExit()
                #expect(peerEnd == .exited(0), "\(peer.diagnostics)")
                #expect(peer.stdoutLines.last?.hasSuffix(" still-alive") == true, "\(peer.diagnostics)")
            }
        }

        /// Connects, sends (HELLO +) the garbage in one write, and reads frames until the daemon closes.
        static func exchange(_ garbage: Garbage, socketPath: String) async throws -> [ServerFrame] {
            let client = try await TestClient.connect(to: socketPath, name: "garbage-client")
            var bytes: [UInt8] = []
            if garbage.sendHello {
                bytes += ClientFrame.hello(.init(clientName: client.name)).encoded().readableBytesView
            }
            bytes += garbage.bytes
            try await client.sendRaw(bytes)
            let (frames, end) = try await client.framesUntilEnd()
            guard end == .endOfFile else { throw TestFailure("\(garbage): \(end) (frames: \(frames.map(\.summary)))") }
            return frames
        }
    }
}
