// notify-test-peer: a small program built on the Notify client library, driven by the integration tests as a
// real, separate client process.
//
// Output protocol (what the tests parse):
// - `observe` prints `ready` on stdout once its subscription is active in the daemon, then one line per
//   notification: `<sender pid> <sequence> <payload text>`. Connection events go to stderr as
//   `event: <description>`; after every reconnection it waits for the daemon to have the resubscription and
//   prints `resubscribed` on stderr.
// - `post` prints `done` on stdout once the daemon has processed every post.
// - `observe-typed` observes `PeerMessage`, prints `ready`, then `message <index> <text>` per decoded message and
//   `decode-failure <reason>` per payload that did not decode; exits 0 after `--count` lines of either kind.
// - `post-typed` posts `--count` `PeerMessage`s (index 0..., text `typed-<index>`), then prints `done`.
// Any failure: a message on stderr starting with `notify-test-peer:` and a non-zero exit status.

import ArgumentParser
import Dispatch
import Foundation
import Notify

struct NotifyTestPeer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notify-test-peer",
        abstract: "A Notify client-library program for the integration tests.",
        subcommands: [Observe.self, Post.self, ObserveTyped.self, PostTyped.self]
    )
}

/// Where an observer's handler runs.
enum TargetKind: String, ExpressibleByArgument, CaseIterable {
    /// A serial `DispatchQueue` owned by the peer (`DeliveryTarget.queue`).
    case queue
    /// The library's I/O thread (`DeliveryTarget.immediate`).
    case immediate
}

/// A failure the peer reports as `notify-test-peer: MESSAGE` with exit status 1.
struct PeerFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension NotifyTestPeer {
    struct Observe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Observe a name and print one line per notification: <sender pid> <sequence> <payload>.")

        @Option(name: .long, help: "The daemon's socket path.")
        var socket: String

        @Option(name: .long, help: "The notification name to observe.")
        var name: String

        @Option(name: .long, help: "Exit 0 after this many notifications (default: run until killed).")
        var count: Int?

        @Option(name: .long, help: "Where the handler runs: queue or immediate.")
        var target: TargetKind = .queue

        func validate() throws {
            if let count, count < 1 { throw ValidationError("--count must be at least 1") }
        }

        func run() async throws {
            try await reportingFailures {
                let center = try await connect(socket)
                let (stream, continuation) = AsyncStream<ReceivedNotification>.makeStream()
                let queue = DispatchQueue(label: "notify-test-peer.observer")

                let deliveryTarget: DeliveryTarget
                let handler: @Sendable (ReceivedNotification) -> Void
                switch target {
                case .queue:
                    deliveryTarget = .queue(queue)
                    handler = { notification in
                        // Traps (non-zero exit) if the library ran the handler anywhere but on `queue`.
                        dispatchPrecondition(condition: .onQueue(queue))
                        continuation.yield(notification)
                    }
                case .immediate:
                    deliveryTarget = .immediate
                    handler = { notification in
                        dispatchPrecondition(condition: .notOnQueue(queue))
                        continuation.yield(notification)
                    }
                }
                let observation = try center.observe(name, on: deliveryTarget, handler: handler)

                let events = center.connectionEvents()
                try await center.synchronize()
                Output.line("ready")

                let eventTask = Task {
                    for await event in events {
                        Output.error("event: \(event)")
                        if case .connected = event {
                            // Resubscription was pipelined behind HELLO; the barrier says when the daemon has it.
                            do {
                                try await center.synchronize()
                                Output.error("resubscribed")
                            } catch {
                                Output.error("event: synchronize after reconnecting failed: \(error)")
                            }
                        }
                    }
                }
                defer { eventTask.cancel() }

                var received = 0
                for await notification in stream {
                    let payload = notification.payloadString
                        ?? "hex:" + notification.payload.map { String(format: "%02x", $0) }.joined()
                    Output.line("\(notification.sender.pid) \(notification.sequence) \(payload)")
                    received += 1
                    if let count, received >= count { break }
                }
                observation.cancel()
                await center.close()
            }
        }
    }

    struct Post: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Post notifications fire-and-forget (payload <prefix><i>), then wait until the daemon has them.")

        @Option(name: .long, help: "The daemon's socket path.")
        var socket: String

        @Option(name: .long, help: "The notification name to post.")
        var name: String

        @Option(name: .long, help: "How many notifications to post.")
        var count: Int = 1

        @Option(name: .long, help: "Payload prefix; notification i carries the text <prefix><i>.")
        var prefix: String = ""

        func validate() throws {
            if count < 0 { throw ValidationError("--count must not be negative") }
        }

        func run() async throws {
            try await reportingFailures {
                let center = try await connect(socket)
                // Rejections of fire-and-forget posts arrive as connection events; so would a lost connection.
                let events = center.connectionEvents()
                let problems = Task {
                    var problems: [String] = []
                    for await event in events {
                        // Anything but a (re)connection means a post may not have reached the daemon.
                        if case .connected = event { continue }
                        problems.append("\(event)")
                    }
                    return problems
                }
                for index in 0..<count {
                    try center.post(name, text: "\(prefix)\(index)")
                }
                try await center.synchronize()
                // Closing finishes the event stream; events that arrived before the barrier's answer are kept.
                await center.close()
                let seen = await problems.value
                guard seen.isEmpty else {
                    throw PeerFailure("posting failed: \(seen.joined(separator: "; "))")
                }
                Output.line("done")
            }
        }
    }
}

func connect(_ socket: String) async throws -> NotifyCenter {
    try await NotifyCenter.connect(
        configuration: NotifyCenter.Configuration(socketPath: socket, clientName: "notify-test-peer"))
}

/// Runs `body`; any error becomes `notify-test-peer: MESSAGE` on stderr and exit status 1.
func reportingFailures(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as ExitCode {
        throw error
    } catch {
        Output.error("notify-test-peer: \(error)")
        throw ExitCode.failure
    }
}

/// The typed message the `*-typed` subcommands exchange across processes.
struct PeerMessage: NotifyMessage {
    static let name = "peer.typed.message"
    var index: Int
    var text: String
    var at: Date
}

extension NotifyTestPeer {
    struct ObserveTyped: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "observe-typed", abstract: "Observe PeerMessage and print each decoded message or failure.")

        @Option(name: .long, help: "The daemon's socket path.")
        var socket: String

        @Option(name: .long, help: "Exit 0 after this many lines (messages and decoding failures).")
        var count: Int

        func run() async throws {
            let center = try await NotifyCenter.connect(configuration: .init(socketPath: socket))
            let (lines, continuation) = AsyncStream<String>.makeStream()
            let observation = try center.observe(
                PeerMessage.self, on: .queue(DispatchQueue(label: "typed")),
                onDecodingFailure: { continuation.yield("decode-failure \($0.reason)") }
            ) { message in
                continuation.yield("message \(message.index) \(message.text)")
            }
            try await center.synchronize()
            Output.line("ready")
            var printed = 0
            for await line in lines {
                Output.line(line)
                printed += 1
                if printed == count { break }
            }
            withExtendedLifetime(observation) {}
            await center.close()
        }
    }

    struct PostTyped: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "post-typed", abstract: "Post PeerMessages.")

        @Option(name: .long, help: "The daemon's socket path.")
        var socket: String

        @Option(name: .long, help: "How many messages to post.")
        var count: Int

        func run() async throws {
            let center = try await NotifyCenter.connect(configuration: .init(socketPath: socket))
            for index in 0..<count {
                try center.post(PeerMessage(index: index, text: "typed-\(index)", at: Date()))
            }
            try await center.synchronize()
            Output.line("done")
            await center.close()
        }
    }
}

/// Unbuffered line output, so every line reaches the test's pipe as soon as it is printed.
enum Output {
    static func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    static func error(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
}

/// Top-level code would pick ArgumentParser's synchronous `main()`; from an `async` function the asynchronous one,
/// which runs the `async` subcommands, is chosen.
func runAsyncCommand() async {
    await NotifyTestPeer.main()
}

await runAsyncCommand()
