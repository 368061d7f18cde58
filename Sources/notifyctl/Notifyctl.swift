import ArgumentParser
import Foundation
import Notify

@main
struct Notifyctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notifyctl",
        abstract: "Post and observe notifyd notifications from the shell.",
        discussion: """
            The daemon's socket is --socket, else $NOTIFYD_SOCKET, else /run/notifyd/notifyd.sock for root and \
            $XDG_RUNTIME_DIR/notifyd/notifyd.sock for other users.
            """,
        subcommands: [Post.self, Listen.self, State.self, Status.self, Names.self, Clients.self]
    )
}

/// Options every subcommand shares.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .long, help: "The daemon's Unix socket path.")
    var socket: String?

    func connect() async throws -> NotifyCenter {
        do {
            return try await NotifyCenter.connect(
                configuration: NotifyCenter.Configuration(socketPath: socket, clientName: "notifyctl"))
        } catch {
            throw CommandFailure("\(error)")
        }
    }
}

/// A runtime failure: printed as `notifyctl: MESSAGE` on stderr, exit status 1.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension AsyncParsableCommand {
    /// Runs `body`, turning failures into a message on stderr and a non-zero exit status.
    func reportingFailures(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let failure as CommandFailure {
            StandardStreams.error("notifyctl: \(failure.description)")
            throw ExitCode.failure
        } catch let error as NotifyError {
            StandardStreams.error("notifyctl: \(error.description)")
            throw ExitCode.failure
        }
    }
}

/// Unbuffered line output, so lines reach pipes as they happen.
enum StandardStreams {
    static func output(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func error(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
