import Logging
import NIOEmbedded
import NotifyTestSupport
import NotifyWire
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import NotifyServer

/// The thread name prefix of a server's event loop group, e.g. `NIO-ELT-12-#`.
func eventLoopThreadPrefix(of server: NotifyServer) throws -> String {
    // "MultiThreadedEventLoopGroup { threadPattern = NIO-ELT-12-#* }"
    let description = String(describing: server.group)
    let start = try #require(description.range(of: "threadPattern = ")).upperBound
    let end = try #require(description[start...].firstIndex(of: "*"))
    return String(description[start..<end])
}

/// Runs `body` on the server's event loop with its broker.
func withBroker<T: Sendable>(of server: NotifyServer, _ body: @escaping @Sendable (Broker) -> T) async throws -> T {
    let bound = try #require(server.broker.withLockedValue { $0 }, "the server is running")
    return try await bound.eventLoop.submit { body(bound.value) }.get()
}

/// A transport that goes nowhere, for peers that are only compared by identity (a peer does not retain its
/// transport: use the shared instance, which lives as long as the process).
final class NullTransport: PeerTransport, Sendable {
    static let shared = NullTransport()

    func write(_ bytes: ByteBuffer) {}
    func flush() {}
    func whenWritten(_ body: @escaping () -> Void) {}
    func stopReadingForBackPressure() {}
    func backPressureRelieved() {}
    var mustNotBeWrittenNow: Bool { false }
    func flushWhenWritable(_ flush: @escaping () -> Void) {}
    func close() {}
}

/// `count` peers of a broker on an embedded event loop, which never see a channel.
func makeDetachedPeers(_ count: Int, label: String) -> [Peer] {
    let broker = Broker(
        eventLoop: EmbeddedEventLoop(),
        configuration: ServerConfiguration(listenAddress: .path("/nonexistent/\(label).sock")),
        instanceID: InstanceID(high: 0, low: 0), daemonPID: 1, logger: Logger(label: label))
    return (0..<count).map { _ in
        Peer(broker: broker, credentials: SenderCredentials(pid: 1, uid: 0, gid: 0), transport: NullTransport.shared)
    }
}

extension PatternTrie {
    /// Adds `peer` under `pattern` with a default subscription (tests that only compare peers).
    func insert(_ pattern: NotificationPattern, _ peer: Peer) {
        set(pattern, Subscriber(peer: peer, subscriptionID: 0, policy: .coalesce))
    }
}

/// Parses an access configuration written in the tests (source name `test.conf`); fails the test when it does
/// not parse.
func parseAccess(_ text: String, source: String = "test.conf") throws -> AccessConfiguration {
    do {
        return try AccessConfiguration.parse(text, source: source)
    } catch {
        throw TestFailure("the test configuration does not parse: \(error)")
    }
}
