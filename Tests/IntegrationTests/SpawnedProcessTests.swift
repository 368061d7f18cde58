#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport
import Testing

extension Integration {
    /// How every test starts a child (``SpawnedProcess``): what the child gets of the test process, and what the
    /// test learns of its end.
    @Suite("Spawning children")
    struct SpawnedProcessTests {
        @Test("with 2,000 descriptors open, close-on-exec or not, a child starts with only stdin, stdout and stderr")
        func childGetsOnlyItsStandardDescriptors() throws {
            // Enough entries to fill glibc's 32 KiB buffer for /proc/self/fd, where Foundation's Process read past
            // the end of it (swift-corelibs-foundation #5472).
            var held: [Int32] = []
            defer { for descriptor in held { close(descriptor) } }
            for _ in 0..<2_000 {
                let descriptor = open("/dev/null", O_RDONLY)  // inheritable
                try #require(descriptor >= 0, "open /dev/null: \(String(cString: strerror(errno)))")
                held.append(descriptor)
            }
            for _ in 0..<20 {
                let run = try SpawnedProcess.run(executable: "/bin/ls", arguments: ["/proc/self/fd"])
                #expect(run.termination == .exited(0), "\(String(decoding: run.stderr, as: UTF8.self))")
                // 3 is the directory ls itself opened to list.
                let listed = String(decoding: run.stdout, as: UTF8.self).split(separator: "\n")
                #expect(listed == ["0", "1", "2", "3"], "descriptors the child had open")
            }
        }

        @Test("an exit status and a killing signal are reported as such, with what the child wrote on each stream")
        func terminations() throws {
            let exited = try SpawnedProcess.run(executable: "/bin/sh", arguments: ["-c", "echo out; echo err >&2; exit 3"])
            #expect(exited.termination == .exited(3))
            #expect(String(decoding: exited.stdout, as: UTF8.self) == "out\n")
            #expect(String(decoding: exited.stderr, as: UTF8.self) == "err\n")

            let killed = try SpawnedProcess.run(executable: "/bin/sh", arguments: ["-c", "kill -TERM $$"])
            #expect(killed.termination == .signaled(SIGTERM))

            let ended = DispatchSemaphore(value: 0)
            let child = try SpawnedProcess(
                executable: "/bin/true", arguments: [], standardOutput: 2, standardError: 2,
                exited: { _ in ended.signal() })
            #expect(ended.wait(timeout: .now() + 20) == .success, "/bin/true did not end within 20 s")
            #expect(child.termination == .exited(0))
        }
    }
}
