#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport

/// Paths and programs the systemd integration tests need.
enum SystemdEnvironment {
    /// The package root, from this file's path (`Tests/IntegrationTests/SystemdSupport/…`).
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `<package root>/systemd`, the unit files.
    static var unitDirectory: URL { packageRoot.appendingPathComponent("systemd") }

    /// The full path of a program on `PATH` (or in the usual system directories).
    static func program(_ name: String) throws -> URL {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        for directory in directories where access(directory + "/" + name, X_OK) == 0 {
            return URL(fileURLWithPath: directory + "/" + name)
        }
        throw TestFailure("\(name) is not installed (searched \(directories.joined(separator: ":"))); install systemd")
    }

    /// A minimal environment for a daemon started with an explicit environment: `PATH` plus `extra`.
    static func daemonEnvironment(_ extra: [String: String]) -> [String: String] {
        ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"].merging(extra) { _, new in new }
    }
}

extension IntegrationScope {
    /// Starts a program that is not one of the package's tools (e.g. `systemd-socket-activate`), or one of them
    /// with an explicit environment. The caller stops it; if it is still running when the returned process is
    /// released, it is killed.
    func launchProcess(_ executable: URL, _ arguments: [String], environment: [String: String]? = nil) throws
        -> ChildProcess
    {
        try ChildProcess(executable: executable, arguments: arguments, environment: environment)
    }

    /// Runs a program to completion (fails after `timeout` seconds) and returns it.
    func runProcess(_ executable: URL, _ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60)
        async throws -> ChildProcess
    {
        let child = try launchProcess(executable, arguments, environment: environment)
        try await child.waitForExit(timeout: timeout)
        return child
    }
}
