import CNotifyTestSpawn
import Foundation
import Glibc
import NIOConcurrencyHelpers

/// How a child process ended.
package enum ChildTermination: Sendable, Hashable, CustomStringConvertible {
    case exited(Int32)
    case signaled(Int32)
    /// The test process could not wait for the child (`waitpid(2)` failed with this error number): its end is
    /// unknown, never taken for a success.
    case unknown(errno: Int32)

    /// The status `waitpid(2)` reported, decoded (what the `WIFEXITED` family of macros, not imported, would say).
    init(waitStatus status: Int32) {
        self = status & 0x7f == 0 ? .exited((status >> 8) & 0xff) : .signaled(status & 0x7f)
    }

    package var description: String {
        switch self {
        case .exited(let status): "exited with status \(status)"
        case .signaled(let signal): "killed by signal \(signal)"
        case .unknown(let error): "not waited for (waitpid: \(String(cString: strerror(error))))"
        }
    }
}

/// A child process started with `posix_spawn(3)`, the way every test starts one.
///
/// Not Foundation's `Process`: in Swift 6.3.1 its `run()` copies the whole 256-byte name field of each
/// `/proc/self/fd` entry, reading past glibc's directory buffer, and crashed the test process (in one full test
/// run of a few) whenever a thousand descriptors or more were open (swift-corelibs-foundation #5472, fixed after
/// 6.3.1).
///
/// The child is reaped by a thread of its own. A signal is never sent after the reaping (when its pid could
/// belong to another process): the thread waits for the exit without reaping, then reaps under the same lock
/// ``send(_:)`` takes.
package final class SpawnedProcess: Sendable {
    /// The child's process id.
    package let pid: pid_t
    /// `nil` until the child has been reaped.
    private let reaped = NIOLockedValueBox<ChildTermination?>(nil)

    /// Starts `executable` with `arguments` (the program's name is added as `argv[0]`) and `environment` (`nil`:
    /// this process's), standard input on `/dev/null` or `standardInput`, standard output and error on the given
    /// descriptors (which the caller still owns and closes; each above 2, since they are moved into place in
    /// order), nothing else of this process open, every signal at its default, and a process group of its own.
    ///
    /// - Parameter exited: called once, on the reaping thread, when the child has ended and been reaped.
    package init(
        executable: String, arguments: [String], environment: [String: String]? = nil, standardInput: Int32? = nil,
        standardOutput: Int32, standardError: Int32, exited: @escaping @Sendable (ChildTermination) -> Void = { _ in }
    ) throws(TestFailure) {
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { $0.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer {
            for string in argv { free(string) }
            for string in envp ?? [] { free(string) }
        }
        var spawned: pid_t = 0
        let error = argv.withUnsafeBufferPointer { argv in
            func spawn(_ envp: UnsafePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
                notifyd_test_spawn(
                    &spawned, executable, argv.baseAddress, envp, standardInput ?? -1, standardOutput, standardError)
            }
            guard let envp else { return spawn(nil) }
            return envp.withUnsafeBufferPointer { spawn($0.baseAddress) }
        }
        guard error == 0 else {
            throw TestFailure("cannot start \(executable): \(String(cString: strerror(error)))")
        }
        let pid = spawned
        self.pid = pid
        let reaped = reaped
        Thread {
            var info = siginfo_t()
            // Waits for the exit, leaving the child a zombie (its pid still taken) until reaped below.
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
            let termination = reaped.withLockedValue { reaped in
                var status: Int32 = 0
                var result: pid_t
                repeat { result = waitpid(pid, &status, 0) } while result < 0 && errno == EINTR
                reaped = result == pid ? ChildTermination(waitStatus: status) : .unknown(errno: errno)
                return reaped!
            }
            exited(termination)
        }.start()
    }

    /// How the child ended; `nil` until it has been reaped.
    package var termination: ChildTermination? { reaped.withLockedValue { $0 } }

    /// Sends `signal` unless the child has already been reaped.
    package func send(_ signal: Int32) {
        reaped.withLockedValue { reaped in
            if reaped == nil { kill(pid, signal) }
        }
    }

    /// A pipe whose two ends are close-on-exec: `(read, write)`.
    package static func makePipe() throws(TestFailure) -> (read: Int32, write: Int32) {
        var descriptors: [Int32] = [-1, -1]
        guard notifyd_test_pipe(&descriptors) == 0 else {
            throw TestFailure("pipe2 failed: \(String(cString: strerror(errno)))")
        }
        return (descriptors[0], descriptors[1])
    }

    /// Reads `descriptor` to its end, passing each chunk to `body`, then closes it (blocking: call on a thread).
    package static func readToEnd(_ descriptor: Int32, _ body: ([UInt8]) -> Void) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                body(Array(buffer[0..<count]))
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                break
            }
        }
        close(descriptor)
    }

    /// Runs `executable` to its end with its standard streams on `/dev/null`, blocking the calling thread: for a
    /// program that leaves something running which must hold no pipe of the test's (a daemon it starts).
    ///
    /// - Throws: if it cannot start, or has not ended after `timeout` seconds (it is then killed).
    package static func runDiscardingOutput(
        executable: String, arguments: [String], timeout: Double = 20
    ) throws(TestFailure) -> ChildTermination {
        let null = try nullDevice()
        defer { close(null) }
        let ended = DispatchSemaphore(value: 0)
        let child = try SpawnedProcess(
            executable: executable, arguments: arguments, standardOutput: null, standardError: null,
            exited: { _ in ended.signal() })
        guard ended.wait(timeout: .now() + timeout) == .success else {
            child.send(SIGKILL)
            throw TestFailure("\(executable) \(arguments.joined(separator: " ")) did not end within \(timeout) s")
        }
        return child.termination!
    }

    /// `/dev/null` open for writing, close-on-exec, on a descriptor above 2 (a test process may run with one of its
    /// standard descriptors closed, and a child's are moved into place in order).
    package static func nullDevice() throws(TestFailure) -> Int32 {
        let opened = open("/dev/null", O_WRONLY | O_CLOEXEC)
        guard opened >= 0 else { throw TestFailure("cannot open /dev/null: \(String(cString: strerror(errno)))") }
        guard opened <= 2 else { return opened }
        defer { close(opened) }
        let moved = fcntl(opened, F_DUPFD_CLOEXEC, 3)
        guard moved >= 0 else { throw TestFailure("cannot move /dev/null above 2: \(String(cString: strerror(errno)))") }
        return moved
    }

    /// Starts `executable` with its standard error, and its standard output unless `standardOutput` is given, on
    /// new pipes: the child and the pipes' read ends, which the caller reads and closes. Only the child holds the
    /// write ends once this returns, so each read ends when the child (and what it started) is gone.
    package static func startPiped(
        executable: String, arguments: [String], environment: [String: String]? = nil, standardOutput: Int32? = nil,
        exited: @escaping @Sendable (ChildTermination) -> Void
    ) throws(TestFailure) -> (child: SpawnedProcess, stdout: Int32?, stderr: Int32) {
        var output: (read: Int32, write: Int32)?
        if standardOutput == nil { output = try makePipe() }
        let errors: (read: Int32, write: Int32)
        do {
            errors = try makePipe()
        } catch {
            if let output { for descriptor in [output.read, output.write] { close(descriptor) } }
            throw error
        }
        defer {
            if let output { close(output.write) }
            close(errors.write)
        }
        do {
            let child = try SpawnedProcess(
                executable: executable, arguments: arguments, environment: environment,
                standardOutput: output?.write ?? standardOutput!, standardError: errors.write, exited: exited)
            return (child, output?.read, errors.read)
        } catch {
            if let output { close(output.read) }
            close(errors.read)
            throw error
        }
    }

    /// Runs `executable` to its end, blocking the calling thread: its termination, standard output and standard
    /// error (each read on a thread of its own, so that neither pipe can fill up and stop the child).
    package static func run(
        executable: String, arguments: [String], environment: [String: String]? = nil
    ) throws(TestFailure) -> (termination: ChildTermination, stdout: [UInt8], stderr: [UInt8]) {
        let collected = NIOLockedValueBox((stdout: [UInt8](), stderr: [UInt8](), termination: ChildTermination?.none))
        let finished = DispatchGroup()
        finished.enter()
        let started: (child: SpawnedProcess, stdout: Int32?, stderr: Int32)
        do {
            started = try startPiped(
                executable: executable, arguments: arguments, environment: environment,
                exited: { termination in
                    collected.withLockedValue { $0.termination = termination }
                    finished.leave()
                })
        } catch {
            finished.leave()
            throw error
        }
        finished.enter()
        Thread {
            readToEnd(started.stderr) { bytes in collected.withLockedValue { $0.stderr += bytes } }
            finished.leave()
        }.start()
        readToEnd(started.stdout!) { bytes in collected.withLockedValue { $0.stdout += bytes } }
        finished.wait()
        return collected.withLockedValue { ($0.termination!, $0.stdout, $0.stderr) }
    }
}
