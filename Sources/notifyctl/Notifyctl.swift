#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
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

            When the program reading its output goes away (as head does), notifyctl ends at its next line the \
            way cat and grep do: killed by SIGPIPE (status 141 in the shell), printing nothing.
            """,
        subcommands: [Post.self, Listen.self, State.self, Status.self, Names.self, Clients.self]
    )

    /// The entry point: a closed output pipe must end notifyctl quietly rather than crash it.
    static func main() async {
        // NIO ignores SIGPIPE anyway once it opens a socket; ignoring it from the start makes every write to a
        // closed pipe fail with EPIPE, which StandardStreams turns into the conventional SIGPIPE death.
        _ = signal(SIGPIPE, SIG_IGN)
        await main(nil)
    }
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
///
/// Written with write(2) rather than FileHandle, whose write traps on EPIPE ("Fatal error: 'try!'", exit 132
/// under `notifyctl status | head -1`).
enum StandardStreams {
    /// Writes a line to stdout; when nobody reads stdout any more, ends the process (see ``readerGone()``).
    static func output(_ line: String) {
        if !write(line + "\n", to: STDOUT_FILENO), errno == EPIPE { readerGone() }
    }

    /// Writes a line to stderr. Failures are dropped: there is nowhere left to report them, and the exit status
    /// still tells.
    static func error(_ line: String) {
        _ = write(line + "\n", to: STDERR_FILENO)
    }

    /// Writes all of `text`, resuming after partial writes and interrupted calls; `false` with `errno` set on
    /// failure.
    private static func write(_ text: String, to descriptor: Int32) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                #if canImport(Glibc)
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                #else
                let written = Musl.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                #endif
                if written >= 0 {
                    offset += written
                } else if errno != EINTR {
                    return false
                }
            }
            return true
        }
    }

    /// The reader of stdout went away (`| head -1` exited): end at once, as cat or grep would, by the default
    /// action of SIGPIPE, so the shell reports status 141 and prints nothing. Exit status 141 only if the signal
    /// somehow does not end the process.
    private static func readerGone() -> Never {
        _ = signal(SIGPIPE, SIG_DFL)
        var pipeOnly = sigset_t()
        sigemptyset(&pipeOnly)
        sigaddset(&pipeOnly, SIGPIPE)
        pthread_sigmask(SIG_UNBLOCK, &pipeOnly, nil)
        raise(SIGPIPE)
        _exit(128 + SIGPIPE)
    }
}
