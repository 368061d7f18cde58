#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A process's command name as this process sees it (`/proc/PID/comm`).
///
/// The system daemon runs with `ProtectProc=invisible` and cannot see other users' processes, so it reports no
/// command for them; the caller, usually root running `notifyctl clients`, can, and fills them in.
enum ProcessCommand {
    /// The command name of `pid`, or `nil` when this process cannot see it (or `pid` is 0: another pid namespace).
    static func name(of pid: UInt32) -> String? {
        guard pid != 0, let file = fopen("/proc/\(pid)/comm", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 64)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }
}
