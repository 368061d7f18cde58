import Foundation

/// Binds a Unix socket at `path` and closes it without unlinking: the file a crashed daemon leaves behind.
func leaveStaleSocket(at path: String) throws {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket() failed: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw TestFailure("path too long: \(path)") }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        for (index, byte) in bytes.enumerated() { raw[index] = byte }
    }
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
    guard result == 0 else { throw TestFailure("bind(\(path)) failed: errno \(errno)") }
}

/// The file type bits of `path` (without following a symlink), or `nil` if nothing is there.
func fileType(at path: String) -> mode_t? {
    var info = stat()
    guard lstat(path, &info) == 0 else { return nil }
    return info.st_mode & S_IFMT
}

/// The names of this process's threads (Linux `comm`, at most 15 bytes).
func threadNames() -> [String] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.compactMap {
        (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// Waits until no thread's name starts with `prefix`.
func waitUntilNoThread(prefix: String, _ what: String, timeout: Duration = .seconds(10)) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while threadNames().contains(where: { $0.hasPrefix(prefix) }) {
        if clock.now > deadline {
            throw TestFailure("timed out after \(timeout) waiting for \(what) (threads \(prefix)* still running)")
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}
