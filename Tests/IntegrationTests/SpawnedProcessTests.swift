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
        @Test("with 1,400 more descriptors open, close-on-exec or not, a child starts with only stdin, stdout and stderr")
        func childGetsOnlyItsStandardDescriptors() throws {
            // Enough entries to fill glibc's 32 KiB buffer for /proc/self/fd, where Foundation's Process read past
            // the end of it (swift-corelibs-foundation #5472), with room left for the suites running meanwhile.
            var limit = rlimit()
            try #require(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0)
            if limit.rlim_cur < 4_096, limit.rlim_max > limit.rlim_cur {
                limit.rlim_cur = min(limit.rlim_max, 4_096)  // what the other suites open meanwhile needs room too
                _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
                _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            }
            try #require(limit.rlim_cur >= 2_048, "the test needs a descriptor limit of 2,048 (ulimit -n: \(limit.rlim_cur))")
            var held: [Int32] = []
            defer { for descriptor in held { close(descriptor) } }
            for _ in 0..<1_400 {
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

            #expect(throws: TestFailure.self, "a program that is not there: a clear error, not a crash") {
                try SpawnedProcess.run(executable: "/nonexistent/program", arguments: [])
            }
            do {
                _ = try SpawnedProcess.run(executable: "/nonexistent/program", arguments: [])
            } catch {
                #expect("\(error)".contains("/nonexistent/program: No such file or directory"), "\(error)")
            }

            #expect(try SpawnedProcess.runDiscardingOutput(executable: "/bin/true", arguments: []) == .exited(0))
        }

        @Test("a child starts as from a shell: every signal at its default, none blocked, in a process group of its own")
        func signalsAndGroup() throws {
            // This test process ignores SIGPIPE (SwiftNIO does) and its threads block signals of their own.
            let status = try SpawnedProcess.run(executable: "/bin/cat", arguments: ["/proc/self/status"])
            let lines = String(decoding: status.stdout, as: UTF8.self).split(separator: "\n")
            for field in ["SigIgn:", "SigBlk:"] {
                let line = try #require(lines.first { $0.hasPrefix(field) }, "no \(field) line")
                let mask = try #require(UInt64(line.dropFirst(field.count).trimmingCharacters(in: .whitespaces), radix: 16))
                // Signals 1 to 31. glibc's own two (32 and 33, for thread cancellation and set*id) are outside what
                // posix_spawn can reset; the child's glibc installs its handlers for them when it uses them.
                #expect(mask & 0x7fff_ffff == 0, "\(line) in the child")
            }

            let stat = try SpawnedProcess.run(executable: "/bin/cat", arguments: ["/proc/self/stat"])
            let text = String(decoding: stat.stdout, as: UTF8.self)
            let pid = text.split(separator: " ").first.map(String.init)
            // After the command name in parentheses: state, parent pid, process group.
            let afterName = text[text.index(after: try #require(text.lastIndex(of: ")")))...].split(separator: " ")
            #expect(afterName.count > 2 && String(afterName[2]) == pid, "the child leads its own group: \(text)")
        }
    }
}
