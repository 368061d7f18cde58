import Dispatch
import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

@Suite("Shutdown", .timeLimit(.minutes(TestScale.minutes(2))))
struct ShutdownTests {
    @Test("Graceful shutdown writes what is queued, then GOODBYE, then closes; run() returns")
    func gracefulShutdown() async throws {
        let count: UInt32 = 1_000
        let name = "org.example.last-words"
        let server = try await TestServer.start()
        do {
            let subscriber = try await server.connect("subscriber")
            try await subscriber.subscribe(name, subscriptionID: 1, requestID: 1)
            try await subscriber.setReading(false)
            let poster = try await server.connect("poster")
            let silent = try await server.connectRaw("no-hello")
            try await server.waitForSnapshot("three connections") { $0.clients.count == 3 }

            let posts = (0..<count).map {
                ClientFrame.post(ClientFrame.Post(requestID: $0 + 1, name: name, payload: counterPayload($0, size: 1_024)))
            }
            try await poster.send(posts)
            try await poster.expectQuiet()  // every post is queued to the subscriber now
            let pending = try await server.snapshot().clients.first { $0.clientName == "subscriber" }?.pendingBytes ?? 0
            #expect(pending > 0, "the subscriber has not read, so bytes are still queued for it")

            server.server.shutdown()
            try await subscriber.setReading(true)
            for expected in 0..<count {
                let notification = try await subscriber.nextNotification()
                guard counter(of: notification.payload) == expected else {
                    Issue.record("expected notification \(expected), got \(String(describing: counter(of: notification.payload)))")
                    server.abandon()
                    return
                }
            }
            for client in [subscriber, poster, silent] {
                try await client.expectShutdownNotice()
                #expect(try await client.expectEnd() == .endOfFile, "\(client.name)")
            }
            try await server.waitUntilFinished()
        } catch {
            server.abandon()
            throw error
        }
        #expect(fileType(at: server.socketPath) == nil)
        #expect(await server.server.snapshot() == nil)
        TestServer.removeDirectory(server.directory)
    }

    @Test("A subscriber that never reads holds up shutdown no longer than the deadline")
    func shutdownDeadline() async throws {
        let count: UInt32 = 2_000
        let name = "org.example.never-read"
        let server = try await TestServer.start { $0.shutdownDeadlineSeconds = 0.5 }
        do {
            let stalled = try await server.connect("stalled", receiveBufferSize: 4_096)
            try await stalled.subscribe(name, subscriptionID: 1, requestID: 1)
            try await stalled.setReading(false)
            let poster = try await server.connect("poster")
            let posts = (0..<count).map {
                ClientFrame.post(ClientFrame.Post(requestID: $0 + 1, name: name, payload: counterPayload($0, size: 1_024)))
            }
            try await poster.send(posts)
            try await poster.expectQuiet()
            let pending = try await server.snapshot().clients.first { $0.clientName == "stalled" }?.pendingBytes ?? 0
            #expect(pending > 0)

            server.server.shutdown()
            try await server.waitUntilFinished(timeout: .seconds(10))
            #expect(fileType(at: server.socketPath) == nil)

            // The poster read everything, so it got the notice; the stalled connection was cut off.
            try await poster.expectShutdownNotice()
            #expect(try await poster.expectEnd() == .endOfFile)
            try await stalled.setReading(true)
            var received: UInt32 = 0
            readLoop: while true {
                switch try await stalled.nextEvent() {
                case .frame(let frame):
                    if let notification = frame.frame.notification {
                        #expect(counter(of: notification.payload) == received)
                        received += 1
                    }
                case .end:
                    break readLoop
                }
            }
            #expect(received < count, "queued notifications past the deadline are discarded")
        } catch {
            server.abandon()
            throw error
        }
        TestServer.removeDirectory(server.directory)
    }

    @Test("shutdown() called right after onListening has fired stops the server")
    func shutdownRightAfterListening() async throws {
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        let path = directory + "/notifyd.sock"
        let listening = OneShot<Void>()
        let finished = OneShot<Void>()
        // Holds run() inside onListening until the test has called shutdown(): a shutdown request that
        // arrives at any moment after the server announced it is listening.
        let gate = DispatchSemaphore(value: 0)
        let server = NotifyServer(configuration: TestServer.configuration(path: path), logger: TestServer.logger) { _ in
            listening.fulfill(.success(()))
            _ = gate.wait(timeout: .now() + 10)
        }
        let task = Self.run(server, finished: finished)
        try await listening.wait(for: "onListening")
        server.shutdown()
        gate.signal()
        do {
            try await finished.wait(timeout: .seconds(Int64(TestScale.timeout(10))), for: "run() to return after shutdown()")
        } catch {
            Issue.record(error)
            task.cancel()  // the cancellation handler closes the listener, so run() returns
            try await finished.wait(for: "run() to return after cancellation")
        }
        #expect(fileType(at: path) == nil)
    }

    /// Runs `server` in a task that fulfils `finished` when `run()` returns or throws.
    private static func run(_ server: NotifyServer, finished: OneShot<Void>) -> Task<Void, Never> {
        Task {
            do {
                try await server.run()
                finished.fulfill(.success(()))
            } catch {
                finished.fulfill(.failure(error))
            }
        }
    }

    @Test("Task cancellation stops the server like a graceful shutdown")
    func cancellationStopsServer() async throws {
        let directory = try TestServer.makeTemporaryDirectory()
        defer { TestServer.removeDirectory(directory) }
        let path = directory + "/notifyd.sock"
        let listening = OneShot<Void>()
        let finished = OneShot<Void>()
        let server = NotifyServer(configuration: TestServer.configuration(path: path), logger: TestServer.logger) { _ in
            listening.fulfill(.success(()))
        }
        let task = Self.run(server, finished: finished)
        try await listening.wait(for: "onListening")
        let client = try await TestClient.connect(to: path, name: "client")
        try await client.hello()
        try await client.expectQuiet()
        task.cancel()
        try await client.expectShutdownNotice()
        #expect(try await client.expectEnd() == .endOfFile)
        try await finished.wait(for: "run() to return after cancellation")
        #expect(fileType(at: path) == nil)
    }
}
