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
        usage: "notifyctl [--socket <path>] <subcommand> [<arguments>]",
        discussion: """
            The daemon's socket is --socket, else $NOTIFYD_SOCKET, else /run/notifyd/notifyd.sock for root and \
            $XDG_RUNTIME_DIR/notifyd/notifyd.sock for other users. --socket PATH goes before the subcommand \
            (notifyctl --socket PATH status) or after it (notifyctl status --socket PATH), once.

            When the program reading its output goes away (as head does), notifyctl ends at its next line the \
            way cat and grep do: killed by SIGPIPE (status 141 in the shell), printing nothing.
            """,
        subcommands: [Post.self, Listen.self, State.self, Status.self, Names.self, Clients.self, Top.self, Reload.self]
    )

    /// The entry point: a closed output pipe must end notifyctl quietly rather than crash it, and `--socket` may
    /// come before the subcommand, which swift-argument-parser alone would reject.
    static func main() async {
        // NIO ignores SIGPIPE anyway once it opens a socket; ignoring it from the start makes every write to a
        // closed pipe fail with EPIPE, which StandardStreams turns into the conventional SIGPIPE death.
        _ = signal(SIGPIPE, SIG_IGN)
        let arguments: [String]
        do {
            arguments = try SocketOption.placed(Array(CommandLine.arguments.dropFirst()))
        } catch {
            exit(withError: error)
        }
        await main(arguments)
    }
}

/// `--socket PATH` before the subcommand (`notifyctl --socket PATH status`, the systemctl and busctl habit).
///
/// swift-argument-parser takes a subcommand's options only after the subcommand's name, and a parent's options
/// would be parsed wherever they stand, taking them away from the subcommand; so the subcommands keep the only
/// declaration and ``placed(_:)`` moves a leading `--socket` behind the subcommand path before parsing. It also
/// rejects a missing value and a second `--socket`, which the parser would otherwise settle silently (last wins).
enum SocketOption {
    /// The option's spelling, as `ConnectionOptions` declares it.
    static let name = "--socket"

    /// One `--socket` on the command line: the arguments it spans and its value.
    private struct Occurrence {
        var range: Range<Int>
        var value: String
    }

    /// `arguments` (without the program name) with a `--socket` that stands before or between subcommand names
    /// moved to just after the last one; otherwise unchanged.
    static func placed(_ arguments: [String], root: any ParsableCommand.Type = Notifyctl.self) throws -> [String] {
        // Shell completion requests have their own syntax, made by the parser itself.
        if arguments.first == "---completion" { return arguments }
        guard let socket = try occurrence(in: arguments) else { return arguments }

        // Walk the subcommand path (`state get`), stepping over the option wherever it stands on it.
        var command = root
        var index = 0
        var pathEnd = 0
        var pathLength = 0
        while index < arguments.count {
            if socket.range.contains(index) {
                index = socket.range.upperBound
                continue
            }
            let word = arguments[index]
            guard
                let subcommand = command.configuration.subcommands.first(where: {
                    $0._commandName == word || $0.configuration.aliases.contains(word)
                })
            else { break }
            command = subcommand
            index += 1
            pathEnd = index
            pathLength += 1
        }

        var result = arguments
        if command.configuration.subcommands.isEmpty {
            if socket.range.lowerBound >= pathEnd { return arguments }  // already after the subcommand path
            result.insert(contentsOf: arguments[socket.range], at: pathEnd)
            result.removeSubrange(socket.range)
            return result
        }
        // No runnable subcommand: `notifyctl --socket PATH` alone, or followed by --help or a typo.
        if root.configuration.subcommands.contains(where: { $0._commandName == socket.value }) {
            throw ValidationError("--socket needs a value: the path of the daemon's socket")  // `--socket status`
        }
        result.removeSubrange(socket.range)
        if result.count == pathLength {
            throw ValidationError(
                "--socket \(socket.value) needs a subcommand after it, e.g. 'notifyctl --socket \(socket.value) status'")
        }
        return result  // the parser shows the help, or says what is wrong with the rest
    }

    /// The one `--socket` before any `--`, if given.
    private static func occurrence(in arguments: [String]) throws -> Occurrence? {
        var found: [Occurrence] = []
        var index = 0
        while index < arguments.count, arguments[index] != "--" {
            let argument = arguments[index]
            if argument == name {
                let value = index + 1 < arguments.count ? arguments[index + 1] : ""
                guard !value.isEmpty, !value.hasPrefix("-") else {
                    throw ValidationError("--socket needs a value: the path of the daemon's socket")
                }
                found.append(Occurrence(range: index..<index + 2, value: value))
                index += 2
            } else if argument.hasPrefix(name + "=") {
                let value = String(argument.dropFirst(name.count + 1))
                guard !value.isEmpty else { throw ValidationError("--socket needs a value: the path of the daemon's socket") }
                found.append(Occurrence(range: index..<index + 1, value: value))
                index += 1
            } else {
                index += 1
            }
        }
        guard found.count <= 1 else {
            let values = found.map { "'\($0.value)'" }.joined(separator: ", ")
            throw ValidationError(
                "--socket given \(found.count == 2 ? "twice" : "\(found.count) times") (\(values)): give it once, "
                    + "before or after the subcommand")
        }
        return found.first
    }
}

/// Options every subcommand shares.
struct ConnectionOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp("The daemon's Unix socket path (may also go before the subcommand).", valueName: "path"))
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
            StandardStreams.error("notifyctl: \(TerminalText.escaped(failure.description))")
            throw ExitCode.failure
        } catch let error as NotifyError {
            StandardStreams.error("notifyctl: \(TerminalText.escaped(error.description))")
            throw ExitCode.failure
        }
    }
}

/// Unbuffered line output, so lines reach pipes as they happen.
///
/// Written with write(2) rather than FileHandle, whose write traps on EPIPE ("Fatal error: 'try!'", exit 132
/// under `notifyctl status | head -1`).
enum StandardStreams {
    /// Writes a line to stdout; when nobody reads stdout any more, ends the process (see ``readerGone()``); on any
    /// other failure (a full disk: ENOSPC, EIO) says so on stderr and exits 1, rather than lose the output and
    /// exit 0.
    static func output(_ line: String) {
        guard !write(line + "\n", to: STDOUT_FILENO) else { return }
        let code = errno
        if code == EPIPE { readerGone() }
        error("notifyctl: cannot write to standard output: \(String(cString: strerror(code)))")
        exit(EXIT_FAILURE)
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
                } else if errno == EAGAIN || errno == EWOULDBLOCK {
                    // A non-blocking stdout (inherited from a parent that set O_NONBLOCK) whose pipe is full: wait.
                    var ready = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&ready, 1, -1)
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
