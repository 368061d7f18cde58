#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ArgumentParser
import Foundation
import Notify

extension Notifyctl {
    struct Reload: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make the daemon re-read its configuration file, and wait until it has.",
            discussion: """
                Sends SIGHUP to the daemon (the pid its status reports, or --pid) and returns once the daemon has \
                applied the file (exit status 0), or with the daemon's reason on stderr when the file was not \
                applied (exit status 1; the previous rules stay). The units' ExecReload= runs this, so \
                'systemctl reload notifyd' waits for the reload and fails when the file does not parse. Only \
                root or the daemon's own user may signal it.
                """)

        @OptionGroup var connection: ConnectionOptions

        @Option(name: .long, help: "The daemon's pid, when it differs from what its status says (another pid namespace).")
        var pid: Int32?

        @Option(name: .long, help: "Seconds to wait for the daemon to apply the file.")
        var timeout: Double = 10

        func validate() throws {
            if let pid, pid <= 0 { throw ValidationError("--pid must be a positive process id") }
            guard timeout > 0, timeout <= 1e9 else {
                throw ValidationError("--timeout must be a number of seconds above 0 and at most 1000000000, got \(timeout)")
            }
        }

        func run() async throws {
            try await reportingFailures {
                let center = try await connection.connect()
                do {
                    try await reload(center)
                    await center.close()
                } catch {
                    await center.close()
                    throw error
                }
            }
        }

        private func reload(_ center: NotifyCenter) async throws {
            let before = try await center.daemonStatus()
            guard let reloadsBefore = before.configurationReloads else {
                throw CommandFailure("this notifyd (\(before.version)) does not report reloads: send it SIGHUP instead")
            }
            let target = pid ?? Int32(bitPattern: before.pid)
            guard kill(target, SIGHUP) == 0 else {
                let reason = String(cString: strerror(errno))
                throw CommandFailure("cannot signal notifyd (pid \(target)): \(reason)")
            }
            let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1_000))
            while true {
                let status = try await center.daemonStatus()
                if let reloads = status.configurationReloads, reloads > reloadsBefore {
                    if let error = status.lastReloadError {
                        throw CommandFailure("configuration not reloaded, the previous rules stay: \(error)")
                    }
                    return
                }
                if ContinuousClock.now >= deadline {
                    throw CommandFailure("notifyd (pid \(target)) did not finish reloading within \(timeout) s")
                }
                // The daemon posts nothing when it reloads: ask again shortly.
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }
}
