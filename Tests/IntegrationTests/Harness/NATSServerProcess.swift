import Foundation
import NotifyTestSupport

/// A real `nats-server` (Debian's package) on a loopback port, started and stopped by the test.
final class NATSServerProcess: Sendable, CustomStringConvertible {
    static let executable = "/usr/sbin/nats-server"

    let child: ChildProcess
    let host: String
    let port: Int

    var url: String { "nats://\(host):\(port)" }
    var description: String { "nats-server on \(host):\(port) (pid \(child.pid))" }

    private init(child: ChildProcess, host: String, port: Int) {
        self.child = child
        self.host = host
        self.port = port
    }

    /// Starts a server on `host` and `port` (0: any free port) with extra `arguments`, and waits until it listens.
    ///
    /// - Parameter jetStreamDirectory: where JetStream keeps its streams (`-js -sd`); nil: no JetStream. A server
    ///   restarted with the same directory finds its streams again.
    static func start(
        in scope: IntegrationScope, host: String = "127.0.0.1", port: Int = 0, arguments: [String] = [],
        jetStreamDirectory: String? = nil
    ) async throws -> NATSServerProcess {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw TestFailure("\(executable) is missing: `make test-deps` installs Debian's nats-server")
        }
        let jetStream = jetStreamDirectory.map { ["-js", "-sd", $0] } ?? []
        let child = try scope.launchExecutable(
            executable, ["-a", host, "-p", port == 0 ? "-1" : String(port)] + jetStream + arguments)
        let line = try await child.waitForLine(containing: "Listening for client connections on", timeout: 20)
        guard let portText = line.split(separator: ":").last, let actual = Int(portText) else {
            throw TestFailure("cannot read the port from '\(line)'")
        }
        try await child.waitForLine(containing: "Server is ready", timeout: 20)
        return NATSServerProcess(child: child, host: host, port: actual)
    }

    /// Kills the server with SIGKILL (a crash: no goodbye to clients) and waits until it is gone.
    func kill() async throws {
        child.send(SIGKILL)
        _ = try await child.waitForExit(timeout: 20)
    }
}

extension IntegrationScope {
    /// Starts any executable by path; the scope kills it at the end if it is still running.
    func launchExecutable(_ path: String, _ arguments: [String], environment: [String: String]? = nil) throws
        -> ChildProcess
    {
        let child = try ChildProcess(
            executable: URL(fileURLWithPath: path), arguments: arguments,
            environment: environment.map { ProcessInfo.processInfo.environment.merging($0) { _, new in new } })
        adopt(child)
        return child
    }
}
