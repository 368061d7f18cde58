#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Whether the standard error goes to the journal: systemd sets `JOURNAL_STREAM=DEVICE:INODE` for services
/// whose output it connects to the journal, and `systemd.exec(5)` asks programs to compare it with `fstat` of
/// their standard error before switching to the native journal protocol (the variable is inherited by
/// children whose output may go elsewhere).
package enum JournalStream {
    /// The device and inode numbers of `JOURNAL_STREAM`.
    package struct Identity: Sendable, Hashable {
        /// `st_dev` of the stream.
        package var device: UInt64
        /// `st_ino` of the stream.
        package var inode: UInt64

        /// Creates an identity.
        package init(device: UInt64, inode: UInt64) {
            self.device = device
            self.inode = inode
        }
    }

    /// Parses `DEVICE:INODE` (two decimal numbers); `nil` if the value is malformed.
    package static func parse(_ value: String) -> Identity? {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return nil }
        return Identity(device: device, inode: inode)
    }

    /// The identity of an open file descriptor (`fstat`), or `nil` if it is not open.
    package static func identity(ofDescriptor descriptor: Int32) -> Identity? {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        return Identity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Whether `JOURNAL_STREAM` in `environment` names the stream that is this process's standard error.
    package static func isStandardErrorConnectedToJournal(environment: [String: String]) -> Bool {
        guard let value = environment["JOURNAL_STREAM"], let expected = parse(value) else { return false }
        return identity(ofDescriptor: STDERR_FILENO) == expected
    }
}
