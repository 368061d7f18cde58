#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport
import Testing

// A daemon that clients of every uid can reach, started with extra options, and tools run as other uids with
// setpriv.

// MARK: Daemon with options

extension IntegrationScope {
    /// Starts `notifyd --socket <socketPath> <extra…>` and waits until it accepts connections. The scope's directory
    /// is made traversable (0755) first, so that clients of other uids can reach a `--socket-mode 666` socket.
    func startOpenDaemon(
        _ extra: [String], environment: [String: String] = [:], timeout: Double = 20
    ) async throws -> ChildProcess {
        guard chmod(directory, 0o755) == 0 else {
            throw TestFailure("chmod 0755 \(directory) failed: \(String(cString: strerror(errno)))")
        }
        let daemon = try await DaemonProcess.start(
            socketPath: socketPath, options: extra, launch: { try launch($0, $1, environment: environment) },
            timeout: timeout)
        return daemon.child
    }

    /// Stops a daemon with SIGTERM and expects a clean exit.
    func stopDaemon(_ daemon: ChildProcess, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        daemon.send(SIGTERM)
        let end = try await daemon.waitForExit(timeout: 30)
        #expect(end == .exited(0), "notifyd should exit 0 on SIGTERM\n\(daemon.diagnostics)", sourceLocation: sourceLocation)
    }

    /// Runs `tool` as `uid`/`gid` with no supplementary groups (`setpriv --reuid --regid --clear-groups`).
    func runAs(
        uid: UInt32, gid: UInt32, _ tool: Tool, _ arguments: [String], environment: [String: String] = [:],
        timeout: Double = 20
    ) async throws -> ChildProcess {
        let child = try launchAs(uid: uid, gid: gid, tool, arguments, environment: environment)
        try await child.waitForExit(timeout: timeout)
        return child
    }

    /// Starts `tool` as `uid`/`gid` (see ``runAs(uid:gid:_:_:timeout:)``). The scope does not know this child: the
    /// caller waits for it or kills it (and `ChildProcess` kills it when released).
    /// `environment` is added to the tool's environment (through `env`).
    func launchAs(
        uid: UInt32, gid: UInt32, _ tool: Tool, _ arguments: [String], environment: [String: String] = [:]
    ) throws -> ChildProcess {
        let assignments = environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return try ChildProcess(
            executable: CredentialSwitch.setprivURL,
            arguments: CredentialSwitch.setprivArguments(
                PeerIdentity(uid: uid, gid: gid),
                running: ["/usr/bin/env"] + assignments + [try BuildProducts.url(of: tool).path] + arguments))
    }
}

/// Whether the installed `notifyd` has a `--config PATH` option.
let notifydHasConfigOption: Bool = {
    guard let url = try? BuildProducts.url(of: .notifyd) else { return false }
    guard let output = try? SpawnedProcess.run(executable: url.path, arguments: ["--help"]) else { return false }
    return String(decoding: output.stdout + output.stderr, as: UTF8.self).contains("--config")
}()

/// Whether this test process was built with ThreadSanitizer (then so were the tools it runs).
let runningUnderThreadSanitizer: Bool = {
    guard let handle = dlopen(nil, RTLD_NOW) else { return false }
    return dlsym(handle, "__tsan_init") != nil
}()

/// A line of `/proc/PID/status` in bytes, e.g. `VmHWM` (peak resident set size) or `VmRSS`.
func procStatusBytes(pid: Int32, _ key: String) throws -> UInt64 {
    let text = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
    guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(key + ":") }),
        let kilobytes = UInt64(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    else {
        throw TestFailure("no \(key) in /proc/\(pid)/status")
    }
    return kilobytes * 1_024
}
