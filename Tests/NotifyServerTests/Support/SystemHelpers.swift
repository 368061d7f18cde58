import Foundation
import NotifyTestSupport

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
    try await poll("\(what) (threads \(prefix)* still running)", timeout: timeout) {
        threadNames().contains(where: { $0.hasPrefix(prefix) }) ? nil : ()
    }
}
