#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifySystemd

/// How a daemon under systemd learns that a SIGTERM is a restart, not a stop. The unit's `ExecStop=+notifyd
/// --announce-stop` runs before the signal, as root and outside the sandbox, asks the manager on its own socket
/// (`/run/systemd/private`: no D-Bus daemon needed, which a `DynamicUser=` service often cannot reach) which job
/// is running, and leaves the answer next to the socket, in `SOCKET.restart`: the daemon's pid and the store's
/// size for a restart, the pid and `stop` otherwise. The daemon reads it when the signal comes; a file naming
/// another pid is an old one and means nothing.
enum StopAnnouncement {
    /// What the file says about this process's stop.
    enum Answer: Equatable {
        /// A restart job, with the unit's `FileDescriptorStoreMax=`.
        case restart(storeMax: UInt32)
        /// Any other job: the daemon says `GOODBYE`.
        case stop
    }

    static func path(socketPath: String) -> String { socketPath + ".restart" }

    /// What `--announce-stop` does: writes the file, with the store's size for a restart job and `stop` for any
    /// other. Never fails the stop: problems are printed, the file is left out, and the daemon asks on the bus.
    static func announce(socketPath: String, environment: [String: String]) {
        let file = path(socketPath: socketPath)
        unlink(file)
        guard let mainPID = environment["MAINPID"].flatMap(Int32.init), mainPID > 0 else {
            printError("notifyd --announce-stop: no MAINPID (run it from the unit's ExecStop=)")
            return
        }
        let managerSocket =
            environment["MANAGERPID"] != nil
            ? (environment["XDG_RUNTIME_DIR"] ?? "/run/user/\(getuid())") + "/systemd/private" : "/run/systemd/private"
        let job: ServiceJob
        do throws(SystemdError) {
            job = try ServiceJob.of(pid: mainPID, on: .managerSocket(managerSocket))
        } catch {
            printError("notifyd --announce-stop: \(error.description)")
            return
        }
        let text = job.isRestart ? "\(mainPID) \(job.fileDescriptorStoreMax)\n" : "\(mainPID) stop\n"
        let descriptor = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard descriptor >= 0 else {
            printError("notifyd --announce-stop: cannot write \(file): \(String(cString: strerror(errno)))")
            return
        }
        // Readable by the daemon's (dynamic) user: the unit's UMask=0077 applies to this process too.
        fchmod(descriptor, 0o644)
        _ = text.withCString { write(descriptor, $0, strlen($0)) }
        close(descriptor)
    }

    /// What the file says about the stop of the process `pid`, if it names that process.
    static func answer(socketPath: String, pid: Int32) -> Answer? {
        let descriptor = open(path(socketPath: socketPath), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        let fields = String(decoding: buffer.prefix(count), as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard fields.count == 2, Int32(fields[0]) == pid else { return nil }
        if fields[1] == "stop" { return .stop }
        return UInt32(fields[1]).map { .restart(storeMax: $0) }
    }

    private static func printError(_ message: String) {
        var line = Array((message + "\n").utf8)
        _ = write(2, &line, line.count)
    }
}
