#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A process's command name as this process sees it (`/proc/PID/comm`): the daemon reads its clients' (off its
/// event loop); the library fills in those the daemon's sandbox (`ProtectProc=invisible`) hid from it.
package enum ProcessCommand {
    /// The command name of `pid`, or `nil` when this process cannot see it (or `pid` is 0: another pid namespace).
    package static func name(of pid: UInt32) -> String? {
        guard pid != 0, let file = fopen("/proc/\(pid)/comm", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 64)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }
}
