#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport
import Testing

extension Integration {
    /// `notifyctl ... | head -1`: when the reader of standard output goes away, notifyctl must end the way `cat`
    /// or `grep` do (killed by SIGPIPE, status 141 in the shell, nothing on stderr) instead of crashing in a
    /// trapping write; and a `listen` that streams forever must end at its next line.
    @Suite("notifyctl on a closed pipe")
    struct NotifyctlPipeTests {
        @Test(
            "every printing subcommand ends quietly by SIGPIPE when nobody reads its output",
            arguments: [
                ["status"], ["status", "--json"], ["names"], ["clients"], ["state", "get", "com.example.pipe"],
                ["post", "com.example.pipe", "x", "--wait"],
            ])
        func closedPipe(command: [String]) async throws {
            try await withDaemon { scope, _ in
                let child = try PipedNotifyctl(command + ["--socket", scope.socketPath], reader: .closed)
                let end = try await child.waitForExit()
                #expect(end == .signaled(SIGPIPE), "\(child.diagnostics)")
                #expect(!child.stderrText.contains("Fatal error"), "\(child.diagnostics)")
                #expect(child.stderrText.isEmpty, "nothing on stderr\n\(child.diagnostics)")
            }
        }

        @Test(
            "output that cannot be written (a full disk) is an error on stderr and a non-zero exit, not a silent 0",
            arguments: [["status"], ["status", "--json"], ["state", "get", "com.example.full"]])
        func fullDisk(command: [String]) async throws {
            try await withDaemon { scope, _ in
                let child = try scope.launch(
                    .notifyctl, command + ["--socket", scope.socketPath], after: "exec >/dev/full")
                let end = try await child.waitForExit()
                #expect(end == .exited(1), "\(child.diagnostics)")
                #expect(
                    child.stderrText.contains("cannot write to standard output: No space left on device"),
                    "\(child.diagnostics)")
            }
        }

        @Test(
            "a timeout or interval no clock can wait for is refused with a clear error, not a crash",
            arguments: [
                ["listen", "com.example.t", "--timeout", "nan"], ["listen", "com.example.t", "--timeout", "inf"],
                ["listen", "com.example.t", "--timeout", "1e11"], ["reload", "--timeout", "nan"],
                ["top", "--interval", "inf"],
            ])
        func unwaitableDurations(command: [String]) async throws {
            try await withIntegrationScope { scope in
                let child = try await scope.run(.notifyctl, command + ["--socket", scope.socketPath])
                #expect(child.termination == .exited(64), "\(child.diagnostics)")
                #expect(child.stderrText.contains("must be"), "\(child.diagnostics)")
                #expect(!child.stderrText.contains("Fatal error"), "\(child.diagnostics)")
            }
        }

        @Test("listen | head -1 ends listen at the first line written after head has gone")
        func listenStopsWhenReaderLeaves() async throws {
            try await withDaemon { scope, _ in
                let listen = try PipedNotifyctl(["listen", "com.example.pipe", "--socket", scope.socketPath], reader: .open)
                try await listen.waitForStderrLine(containing: "listening")

                let first = try await scope.run(.notifyctl, ["post", "com.example.pipe", "one", "--socket", scope.socketPath])
                #expect(first.termination == .exited(0), "\(first.diagnostics)")
                let line = try listen.readStdoutLine(timeout: 20)
                #expect(line.contains("com.example.pipe") && line.hasSuffix(" one"), "\(line)")

                // head -1 exits: nobody reads any more. listen learns it at its next write.
                listen.closeReader()
                #expect(listen.isRunning, "listen is still waiting for notifications\n\(listen.diagnostics)")
                let second = try await scope.run(.notifyctl, ["post", "com.example.pipe", "two", "--socket", scope.socketPath])
                #expect(second.termination == .exited(0), "\(second.diagnostics)")

                let end = try await listen.waitForExit()
                #expect(end == .signaled(SIGPIPE), "\(listen.diagnostics)")
                #expect(!listen.stderrText.contains("Fatal error"), "\(listen.diagnostics)")
                #expect(listen.stderrLines == ["listening for com.example.pipe"], "\(listen.diagnostics)")
            }
        }
    }
}

/// `notifyctl` with its standard output on a pipe whose read end the test holds or has already closed.
///
/// The harness's ``ChildProcess`` always reads a child's stdout itself, so it cannot stand for a reader that went
/// away; this keeps the same shape (collected stderr, termination, waits with timeouts) for that one case.
final class PipedNotifyctl: Sendable {
    /// Whether the test keeps the read end of stdout's pipe (to read, then close it) or closes it before the start.
    enum Reader {
        case open
        case closed
    }

    /// Collected stderr and exit state, shared with the reader thread and the termination handler.
    private struct State: Sendable {
        var stderr = ChildProcess.Collected()
        var termination: ChildProcess.Termination?
    }

    let commandLine: String
    let pid: Int32
    private let state: Locked<State>
    /// The test's end of stdout's pipe, `nil` once closed.
    private let readEnd: Locked<Int32?>
    /// Bytes read from stdout after the last full line returned.
    private let stdoutBuffer = Locked<[UInt8]>([])
    private let process: SpawnedProcess

    /// Starts `notifyctl arguments`. With `.closed`, stdout's pipe has no reader from the first instruction on, so
    /// the very first line notifyctl writes fails with EPIPE, whatever the timing.
    init(_ arguments: [String], reader: Reader) throws {
        // Close-on-exec, and every spawn closes what it does not pass on: no child may hold a read end (the kernel
        // would then see a reader).
        let stdout = try SpawnedProcess.makePipe()
        if reader == .closed { close(stdout.read) }
        let readEnd = Locked<Int32?>(reader == .open ? stdout.read : nil)
        let state = Locked(State())
        self.readEnd = readEnd
        self.state = state
        commandLine = (["notifyctl"] + arguments).joined(separator: " ")
        // From here on only the child holds the write end.
        defer { close(stdout.write) }
        let stderr: Int32
        do {
            (process, _, stderr) = try SpawnedProcess.startPiped(
                executable: try BuildProducts.url(of: .notifyctl).path, arguments: arguments,
                standardOutput: stdout.write,
                exited: { termination in state.withLock { $0.termination = termination } })
        } catch {
            if let descriptor = readEnd.withLock({ $0 }) { close(descriptor) }
            throw TestFailure("cannot start \(commandLine): \(error)")
        }
        pid = process.pid
        Thread {
            SpawnedProcess.readToEnd(stderr) { bytes in state.withLock { $0.stderr.append(bytes) } }
            state.withLock { $0.stderr.close() }
        }.start()
    }

    deinit {
        process.send(SIGKILL)
        closeReader()
    }

    var stderrLines: [String] { state.withLock { $0.stderr.lines } }
    var stderrText: String { stderrLines.joined(separator: "\n") }
    var isRunning: Bool { state.withLock { $0.termination == nil } }

    /// The command line, exit state and stderr, for failure messages.
    var diagnostics: String {
        let state = state.withLock { $0 }
        let stderr = state.stderr.lines + (state.stderr.partial.isEmpty ? [] : [String(decoding: state.stderr.partial, as: UTF8.self)])
        return """
            process: \(commandLine) (pid \(pid)), \(state.termination.map(\.description) ?? "still running")
              stderr:
            \(stderr.isEmpty ? "    (nothing)" : stderr.map { "    " + $0 }.joined(separator: "\n"))
            """
    }

    /// Closes the test's read end of stdout's pipe, as `head` does when it exits.
    func closeReader() {
        readEnd.withLock { descriptor in
            if let open = descriptor { close(open) }
            descriptor = nil
        }
    }

    /// Reads stdout up to the next newline, waiting in `poll(2)` for at most `timeout` seconds in all.
    func readStdoutLine(timeout: Double) throws -> String {
        guard let descriptor = readEnd.withLock({ $0 }) else { throw TestFailure("stdout's reader is closed") }
        let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
        while true {
            let line: String? = stdoutBuffer.withLock { buffer in
                guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
                defer { buffer.removeSubrange(...newline) }
                return String(decoding: buffer[..<newline], as: UTF8.self)
            }
            if let line { return line }
            guard ContinuousClock.now < deadline else {
                throw TestFailure("timed out after \(timeout) s waiting for a line on stdout\n\(diagnostics)")
            }
            var pollDescriptor = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pollDescriptor, 1, 100)  // wakes on data; the timeout only re-checks the deadline
            if ready < 0 && errno != EINTR {
                throw TestFailure("poll failed: \(String(cString: strerror(errno)))")
            }
            guard ready > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count == 0 { throw TestFailure("stdout ended before a full line\n\(diagnostics)") }
            if count > 0 { stdoutBuffer.withLock { $0.append(contentsOf: chunk[0..<count]) } }
        }
    }

    /// Waits for a line on stderr containing `text`.
    func waitForStderrLine(containing text: String, timeout: Double = 20) async throws {
        _ = try await poll("a line containing \"\(text)\" on stderr of \(commandLine)", timeout: timeout) {
            let (found, finished) = state.withLock { state in
                (state.stderr.lines.contains { $0.contains(text) }, state.termination != nil && state.stderr.isClosed)
            }
            if found { return true }
            if finished { throw TestFailure("\(commandLine) ended before \"\(text)\" on stderr\n\(diagnostics)") }
            return nil
        }
    }

    /// Waits until the process has exited and stderr is complete.
    @discardableResult
    func waitForExit(timeout: Double = 20) async throws -> ChildProcess.Termination {
        do {
            return try await poll("\(commandLine) to exit", timeout: timeout) {
                state.withLock { $0.stderr.isClosed ? $0.termination : nil }
            }
        } catch let error as TestFailure {
            throw TestFailure("\(error.description)\n\(diagnostics)")
        }
    }
}
