import Foundation
import NotifyTestSupport
import Testing

extension Integration {
    /// Several posting and observing processes at once: nothing lost, nothing duplicated, order kept.
    @Suite("fan-out")
    struct FanOutTests {
        static let name = "fanout.test"
        static let postsPerPoster = 1_000
        static let prefixes = ["A", "B"]
        static var total: Int { postsPerPoster * prefixes.count }

        @Test("two posters, three observer processes (notifyctl, queue target, immediate target)")
        func twoPostersThreeObservers() async throws {
            try await withDaemon { scope, _ in
                let socket = scope.socketPath
                let count = "\(Self.total)"
                let listen = try scope.launch(.notifyctl, ["listen", Self.name, "--count", count, "--json", "--socket", socket])
                let queuePeer = try scope.launch(
                    .testPeer, ["observe", "--socket", socket, "--name", Self.name, "--count", count, "--target", "queue"])
                let immediatePeer = try scope.launch(
                    .testPeer,
                    ["observe", "--socket", socket, "--name", Self.name, "--count", count, "--target", "immediate"])
                try await listen.waitForLine(containing: "listening for \(Self.name)", on: .stderr)
                try await queuePeer.waitForLine(containing: "ready", on: .stdout)
                try await immediatePeer.waitForLine(containing: "ready", on: .stdout)

                // Both posters run at the same time.
                let posters = try Self.prefixes.map { prefix in
                    try scope.launch(
                        .testPeer,
                        ["post", "--socket", socket, "--name", Self.name, "--count", "\(Self.postsPerPoster)", "--prefix", prefix])
                }
                for poster in posters {
                    let end = try await poster.waitForExit(timeout: 60)
                    #expect(end == .exited(0), "\(poster.diagnostics)")
                    #expect(poster.stdoutLines == ["done"], "\(poster.diagnostics)")
                }

                for observer in [listen, queuePeer, immediatePeer] {
                    let end = try await observer.waitForExit(timeout: 60)
                    #expect(end == .exited(0), "\(observer.diagnostics)")
                }

                let senders = zip(posters, Self.prefixes).map { (pid: Int($0.pid), prefix: $1) }
                let fromListen = try listen.stdoutLines.map(Delivery.init(jsonLine:))
                let fromQueue = try Self.peerDeliveries(queuePeer)
                let fromImmediate = try Self.peerDeliveries(immediatePeer)
                Self.check(fromListen, observer: "notifyctl listen --json", senders: senders)
                Self.check(fromQueue, observer: "test peer, queue target", senders: senders)
                Self.check(fromImmediate, observer: "test peer, immediate target", senders: senders)

                // Every observer saw the same notifications in the same overall order.
                let reference = fromListen
                for (other, label) in [(fromQueue, "queue target"), (fromImmediate, "immediate target")] {
                    let difference = firstDifference(reference, other)
                    #expect(difference == nil, "notifyctl and the \(label) saw different orders: \(difference ?? "")")
                }
            }
        }

        /// The notification lines of a test-peer observer (everything after its `ready` line).
        static func peerDeliveries(_ peer: ChildProcess) throws -> [Delivery] {
            let lines = peer.stdoutLines
            guard lines.first == "ready" else { throw TestFailure("peer did not start with \"ready\"\n\(peer.diagnostics)") }
            return try lines.dropFirst().map(Delivery.init(peerLine:))
        }

        /// Exactly `total` notifications, sequences strictly increasing, and each poster's payloads complete and in
        /// posting order.
        static func check(
            _ deliveries: [Delivery], observer: String, senders: [(pid: Int, prefix: String)],
            sourceLocation: SourceLocation = #_sourceLocation
        ) {
            #expect(
                deliveries.count == total, "\(observer): received \(deliveries.count) of \(total) notifications",
                sourceLocation: sourceLocation)

            let outOfOrder = zip(deliveries, deliveries.dropFirst()).first { $0.sequence >= $1.sequence }
            #expect(
                outOfOrder == nil,
                "\(observer): sequence numbers not strictly increasing: \(outOfOrder.map { "\($0) then \($1)" } ?? "")",
                sourceLocation: sourceLocation)

            let strangers = deliveries.filter { delivery in !senders.contains { $0.pid == delivery.pid } }
            #expect(
                strangers.isEmpty, "\(observer): notifications from unexpected senders: \(strangers.prefix(5))",
                sourceLocation: sourceLocation)

            for sender in senders {
                let payloads = deliveries.filter { $0.pid == sender.pid }.map(\.payload)
                let expected = (0..<postsPerPoster).map { "\(sender.prefix)\($0)" }
                let difference = firstDifference(payloads, expected)
                #expect(
                    difference == nil,
                    "\(observer): payloads from poster \(sender.prefix) (pid \(sender.pid)) are not \(sender.prefix)0…\(sender.prefix)\(postsPerPoster - 1) in order: \(difference ?? "")",
                    sourceLocation: sourceLocation)
            }
        }
    }
}
