#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport

/// A child process whose standard output and error are collected line by line as they arrive.
///
/// Every wait takes a timeout and fails with an error that shows the process's command line, exit state and
/// recent output. Waits poll the collected state; correctness never depends on how long a poll sleeps.
final class ChildProcess: Sendable, CustomStringConvertible {
    /// How a process ended.
    typealias Termination = ChildTermination

    enum Stream: Sendable {
        case stdout
        case stderr
    }

    /// The collected output of one stream.
    struct Collected: Sendable {
        var lines: [String] = []
        var partial: [UInt8] = []
        var isClosed = false

        mutating func append(_ bytes: some Sequence<UInt8>) {
            for byte in bytes {
                if byte == UInt8(ascii: "\n") {
                    lines.append(String(decoding: partial, as: UTF8.self))
                    partial.removeAll(keepingCapacity: true)
                } else {
                    partial.append(byte)
                }
            }
        }

        mutating func close() {
            if !partial.isEmpty {
                lines.append(String(decoding: partial, as: UTF8.self))
                partial.removeAll()
            }
            isClosed = true
        }
    }

    struct State: Sendable {
        var stdout = Collected()
        var stderr = Collected()
        var termination: Termination?

        subscript(stream: Stream) -> Collected {
            get { stream == .stdout ? stdout : stderr }
            set { if stream == .stdout { stdout = newValue } else { stderr = newValue } }
        }

        /// The process has exited and both pipes reached end-of-file: its output is complete.
        var isFinished: Bool { termination != nil && stdout.isClosed && stderr.isClosed }
    }

    /// Shared between the reader threads, the termination handler and the test.
    final class Box: Sendable {
        let state = Locked(State())
    }

    /// The command line, for messages.
    let commandLine: String
    let pid: Int32
    private let box: Box
    private let process: SpawnedProcess

    /// Starts `executable` with `arguments`; stdin is `/dev/null`.
    init(executable: URL, arguments: [String], environment: [String: String]? = nil) throws {
        let box = Box()
        let commandLine = ([executable.lastPathComponent] + arguments).joined(separator: " ")
        let started: (child: SpawnedProcess, stdout: Int32?, stderr: Int32)
        do {
            started = try SpawnedProcess.startPiped(
                executable: executable.path, arguments: arguments, environment: environment,
                exited: { termination in box.state.withLock { $0.termination = termination } })
        } catch {
            throw TestFailure("cannot start \(commandLine): \(error)")
        }
        process = started.child
        Self.startReader(started.stdout!, .stdout, box)
        Self.startReader(started.stderr, .stderr, box)
        self.box = box
        self.pid = process.pid
        self.commandLine = commandLine
    }

    deinit {
        // Never leave a child behind, whatever happened in the test.
        process.send(SIGKILL)
    }

    /// Reads a pipe on a thread of its own until end-of-file (blocking reads stay off the test's executors).
    private static func startReader(_ descriptor: Int32, _ stream: Stream, _ box: Box) {
        Thread {
            SpawnedProcess.readToEnd(descriptor) { bytes in box.state.withLock { $0[stream].append(bytes) } }
            box.state.withLock { $0[stream].close() }
        }.start()
    }

    // MARK: Reading the collected state

    var stdoutLines: [String] { box.state.withLock { $0.stdout.lines } }
    var stderrLines: [String] { box.state.withLock { $0.stderr.lines } }
    var stderrText: String { stderrLines.joined(separator: "\n") }
    var stdoutText: String { stdoutLines.joined(separator: "\n") }
    /// `nil` while running.
    var termination: Termination? { box.state.withLock { $0.termination } }
    var isRunning: Bool { termination == nil }

    var description: String { "\(commandLine) (pid \(pid))" }

    /// The command line, exit state and the last lines of both streams, for failure messages.
    var diagnostics: String {
        let state = box.state.withLock { $0 }
        func tail(_ collected: Collected) -> String {
            let lines = collected.lines + (collected.partial.isEmpty ? [] : [String(decoding: collected.partial, as: UTF8.self)])
            if lines.isEmpty { return "    (nothing)" }
            let shown = lines.suffix(25)
            var result = lines.count > shown.count ? ["    … \(lines.count - shown.count) earlier line(s)"] : []
            result += shown.map { "    " + $0 }
            return result.joined(separator: "\n")
        }
        return """
            process: \(description), \(state.termination.map(\.description) ?? "still running")
              stdout (\(state.stdout.lines.count) line(s)):
            \(tail(state.stdout))
              stderr:
            \(tail(state.stderr))
            """
    }

    // MARK: Signals

    /// Sends `signal` unless the process has already been reaped.
    func send(_ signal: Int32) {
        process.send(signal)
    }

    // MARK: Waiting

    /// Polls `check` against the collected state until it returns a value; fails if the process finishes first
    /// or `timeout` seconds pass.
    func wait<T: Sendable>(
        for what: String, timeout: Double, _ check: @escaping @Sendable (State) -> T?
    ) async throws -> T {
        try await poll("\(what)\n\(diagnostics)", timeout: timeout) {
            let (result, finished) = box.state.withLock { state in (check(state), state.isFinished) }
            if let result { return result }
            if finished {
                throw TestFailure("\(commandLine) ended before \(what)\n\(diagnostics)")
            }
            return nil
        }
    }

    /// Waits for a line on `stream` containing `text`; returns it. `occurrence` 2 waits for the second such line.
    @discardableResult
    func waitForLine(
        containing text: String, on stream: Stream = .stderr, occurrence: Int = 1, timeout: Double = 20
    ) async throws -> String {
        try await wait(for: "line \(occurrence) containing \"\(text)\" on \(stream)", timeout: timeout) { state in
            let matches = state[stream].lines.lazy.filter { $0.contains(text) }
            return matches.dropFirst(occurrence - 1).first
        }
    }

    /// Waits until at least `count` lines arrived on stdout; returns all of them.
    @discardableResult
    func waitForStdoutLines(_ count: Int, timeout: Double = 20) async throws -> [String] {
        try await wait(for: "\(count) line(s) on stdout", timeout: timeout) { state in
            state.stdout.lines.count >= count ? state.stdout.lines : nil
        }
    }

    /// Waits until the process has exited and its output is complete.
    @discardableResult
    func waitForExit(timeout: Double = 20) async throws -> Termination {
        try await poll("\(commandLine) to exit\n\(diagnostics)", timeout: timeout) {
            box.state.withLock { $0.isFinished ? $0.termination : nil }
        }
    }
}

/// ``NotifyTestSupport/poll(_:timeout:interval:_:)`` with the timeout in seconds, as the harness gives timeouts.
func poll<T: Sendable>(
    _ what: @autoclosure () -> String, timeout: Double, interval: Duration = .milliseconds(10),
    _ check: () async throws -> T?
) async throws -> T {
    try await NotifyTestSupport.poll(what(), timeout: .seconds(timeout), interval: interval, check)
}
