#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifyTestSupport
import Testing

/// A real `notifyd` process serving a socket path.
final class DaemonProcess: Sendable, CustomStringConvertible {
    let socketPath: String
    let child: ChildProcess

    var pid: Int32 { child.pid }
    var description: String { "notifyd on \(socketPath) (pid \(pid))" }

    private init(socketPath: String, child: ChildProcess) {
        self.socketPath = socketPath
        self.child = child
    }

    /// Starts `notifyd --socket socketPath <options…>` and returns once the socket accepts connections.
    ///
    /// - Throws: if the daemon exits first or does not accept connections within `timeout` seconds.
    static func start(
        socketPath: String, options: [String] = [], launch: (Tool, [String]) throws -> ChildProcess, timeout: Double = 20
    ) async throws -> DaemonProcess {
        let child = try launch(.notifyd, ["--socket", socketPath, "--log-level", "info"] + options)
        let daemon = DaemonProcess(socketPath: socketPath, child: child)
        do {
            _ = try await poll("notifyd to accept connections on \(socketPath)", timeout: timeout) { () throws -> Bool? in
                if let termination = child.termination {
                    throw TestFailure("notifyd \(termination) before accepting connections")
                }
                return UnixSocket.acceptsConnections(at: socketPath) ? true : nil
            }
        } catch {
            child.send(SIGKILL)
            throw TestFailure("\(error)\n\(child.diagnostics)")
        }
        return daemon
    }

    /// Stops the daemon with `signal` (SIGTERM or SIGINT) and checks the graceful shutdown: exit status 0, socket
    /// file removed.
    func stop(
        signal: Int32 = SIGTERM, timeout: Double = 20, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        child.send(signal)
        let termination = try await child.waitForExit(timeout: timeout)
        #expect(
            termination == .exited(0), "notifyd should exit 0 on signal \(signal)\n\(child.diagnostics)",
            sourceLocation: sourceLocation)
        #expect(
            !UnixSocket.fileExists(at: socketPath),
            "notifyd should remove its socket file \(socketPath) when it stops", sourceLocation: sourceLocation)
    }

    /// Kills the daemon with SIGKILL (no cleanup: the socket file stays behind) and waits until it is gone.
    @discardableResult
    func kill(timeout: Double = 20) async throws -> ChildProcess.Termination {
        child.send(SIGKILL)
        return try await child.waitForExit(timeout: timeout)
    }
}
