#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// This process's table of descriptors, grown in one step before a hand-over's sockets arrive. The kernel grows
/// it a power of two at a time as descriptors are installed, and in a process with threads every growth waits
/// for an RCU grace period: a successor receiving a thousand sockets waited for four or five of them, one
/// reservation waits for one (BENCHMARKS.md, F20).
package enum DescriptorTable {
    /// Makes room for `count` more descriptors than are open now, duplicating `descriptor` (any open one) to
    /// find the numbers. Best effort: a table that is already large enough is left alone, and past the open-file
    /// limit the table grows only as descriptors arrive.
    package static func reserve(_ count: Int, probingWith descriptor: CInt) {
        guard count > 0 else { return }
        // The lowest free number: the new descriptors take it and the free numbers after it.
        let lowest = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard lowest >= 0 else { return }
        let (top, overflow) = lowest.addingReportingOverflow(CInt(clamping: count - 1))
        close(lowest)
        guard !overflow else { return }
        // A duplicate numbered as the last descriptor that will be needed grows the table once to hold it.
        let probe = fcntl(descriptor, F_DUPFD_CLOEXEC, top)
        if probe >= 0 { close(probe) }
    }
}
