#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Testing

@testable import NotifyServer

/// A successor makes room for the sockets it is handed before they arrive, so the kernel grows its descriptor
/// table once rather than once per power of two (each growth in a process with threads waits for an RCU grace
/// period).
@Suite("Descriptor table")
struct DescriptorTableTests {
    /// How many descriptors the table holds (`FDSize` in `/proc/self/status`).
    static func tableSize() throws -> Int {
        let descriptor = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 1 << 16)
        let count = read(descriptor, &bytes, bytes.count)
        try #require(count > 0)
        for line in String(decoding: bytes.prefix(count), as: UTF8.self).split(separator: "\n")
        where line.hasPrefix("FDSize:") {
            return try #require(Int(String(line.dropFirst(7).filter(\.isNumber))))
        }
        throw TableSizeUnknown()
    }

    struct TableSizeUnknown: Error {}

    @Test("reserving room for more descriptors than the table holds grows it to hold them all at once")
    func growsOnce() throws {
        var limit = rlimit()
        #expect(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0)
        let before = try Self.tableSize()
        // Past what the table holds now (other suites may have grown it), with the open-file limit raised for it
        // if need be.
        let count = before * 2
        // Probed with a descriptor of its own (standard input may be closed); other suites open and close
        // descriptors meanwhile, so only the table's size is checked.
        let probe = open("/dev/null", O_RDONLY | O_CLOEXEC)
        try #require(probe >= 0)
        defer { close(probe) }
        let needed = rlim_t(Int(probe) + count + 64)
        if needed > limit.rlim_cur, needed <= limit.rlim_max {
            limit.rlim_cur = needed
            #expect(setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0)
        }
        try #require(needed <= limit.rlim_cur, "the open-file limit \(limit.rlim_max) is too low for this test")
        DescriptorTable.reserve(count, probingWith: probe)
        let after = try Self.tableSize()
        #expect(after >= count, "the table holds \(after) descriptors, \(before) before, \(count) asked for")
    }
}
