import Foundation
import NIOCore
import NIOPosix
import NotifyTestSupport
import Testing

@testable import Notify

/// A backoff far longer than any wait in these tests: a center that reconnects in time did not wait it out.
private let hourLongBackoff = NotifyCenter.ReconnectPolicy(initialDelay: 3600, maximumDelay: 3600)

@Suite("Reconnecting when the socket appears")
struct ReconnectWatchTests {
    @Test("a center waiting out a long backoff connects once a daemon restarts on its socket")
    func reconnectsWhenDaemonRestarts() async throws {
        let daemon = try await TestServer.start()
        let path = daemon.socketPath
        let center = try await daemon.center(reconnect: hourLongBackoff)
        let events = center.connectionEvents()
        let received = Collector<String>()
        let observation = try center.observe("reconnect.restart", on: .immediate) { received.append($0.payloadString ?? "") }
        try await center.synchronize()
        try await daemon.stop()
        _ = try await firstEvent(events) { if case .disconnected = $0 { true } else { false } }
        // The attempt made after GOODBYE's short delay fails (no socket): from then on the backoff is an hour.
        try await waitForFailedAttempt(center)

        let second = try await TestServer.start(socketPath: path)
        let connected = try await firstEvent(events) { if case .connected = $0 { true } else { false } }
        #expect(connected == .connected(daemonRestarted: true, instanceID: second.server.instanceID))
        try await center.synchronize()
        try await center.postAndWait("reconnect.restart", payload: Array("back".utf8))
        #expect(try await received.wait(for: 1) == ["back"])
        withExtendedLifetime(observation) {}
        await center.close()
        try await second.stop()
    }

    @Test("a center started before its daemon (whose directory does not exist yet) connects once the daemon is up")
    func connectsWhenDaemonFirstAppears() async throws {
        let path = TestServer.makeSocketPath()
        let center = NotifyCenter(
            configuration: NotifyCenter.Configuration(socketPath: path, clientName: "test", reconnect: hourLongBackoff))
        let events = center.connectionEvents()
        try await waitForFailedAttempt(center)

        let daemon = try await TestServer.start(socketPath: path)
        let connected = try await nextEvent(events)
        #expect(connected == .connected(daemonRestarted: false, instanceID: daemon.server.instanceID))
        try await center.synchronize()
        await center.close()
        try await daemon.stop()
    }

    @Test("the watcher follows directories as they appear, then reports the socket's name created and changed")
    func watcherFollowsDirectories() async throws {
        let root = "/tmp/ntw-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { _ = try? FileManager.default.removeItem(atPath: root) }
        let path = root + "/a/b/s.sock"
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let appeared = Collector<Bool>()
        let watcher = try await loop.submit {
            SocketPathWatcher.start(path: path, on: loop) { appeared.append(true) }
        }.get()
        let started = try #require(watcher, "nothing on \(path) could be watched")

        #expect(try await loop.submit { started.watchedDirectory }.get() == "/tmp")
        // It moves down as each directory appears: the nearest existing one is watched for the next.
        for directory in [root, root + "/a", root + "/a/b"] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            try await waitUntil("the watcher moves down to \(directory)") {
                (try? await loop.submit { started.watchedDirectory }.get()) == directory
            }
        }
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        _ = try await appeared.wait(for: 1, "the socket's name created")
        #expect(chmod(path, 0o600) == 0)
        _ = try await appeared.wait(for: 2, "the socket's mode changed")

        try await loop.submit { started.stop() }.get()
        try await group.shutdownGracefully()
    }

    /// The first event from `events` that `matches`, failing after 10 seconds.
    private func firstEvent(
        _ events: AsyncStream<ConnectionEvent>, _ matches: @escaping @Sendable (ConnectionEvent) -> Bool
    ) async throws -> ConnectionEvent {
        try await withTimeout(10, "no matching connection event") {
            for await event in events where matches(event) { return event }
            throw TestFailure("the connection events ended")
        }
    }

    /// Waits until the center's latest connection attempt failed for want of a daemon, so it waits out its
    /// backoff (rather than the delay a GOODBYE asked for, or the first attempt still being under way).
    private func waitForFailedAttempt(_ center: NotifyCenter) async throws {
        try await waitUntil("a connection attempt failed") {
            do {
                try await center.core.waitUntilConnected(failFast: true, timeout: 10)
                return false
            } catch NotifyError.cannotConnect(_, let reason) {
                return !reason.contains("shutting down")
            } catch {
                return false
            }
        }
    }
}
