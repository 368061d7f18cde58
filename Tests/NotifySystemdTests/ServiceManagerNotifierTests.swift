#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifyTestSupport
import Testing

@testable import NotifySystemd

/// The environment is passed explicitly: changing the test process's own (setenv while other tests start
/// processes) crashed a concurrent Process.run. The real NOTIFY_SOCKET path is covered by the integration tests.
@Suite("Service manager notifications")
struct ServiceManagerNotifierTests {
    @Test("without NOTIFY_SOCKET nothing is sent and nothing fails")
    func noManager() throws {
        let notifier = ServiceManagerNotifier(environment: [:])
        #expect(try notifier.ready(status: "x") == false)
        #expect(try notifier.watchdogPing() == false)
        #expect(try notifier.stopping() == false)
    }

    @Test("messages arrive as preformatted assignments; a status is flattened to one line")
    func messages() async throws {
        var template = Array("/tmp/nsd-XXXXXX".utf8CString)
        let directory = try #require(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }.map { String(cString: $0) })
        let receiver = try ServiceManagerSocket(path: directory + "/notify.sock")
        defer {
            unlink(receiver.path)
            rmdir(directory)
        }
        let notifier = ServiceManagerNotifier(environment: ["NOTIFY_SOCKET": receiver.path])

        #expect(try notifier.ready(status: "2 connections,\n1 subscription", mainPID: 4242))
        #expect(try await receiver.nextMessage() == "READY=1\nSTATUS=2 connections, 1 subscription\nMAINPID=4242")
        #expect(try notifier.status("idle"))
        #expect(try await receiver.nextMessage() == "STATUS=idle")
        #expect(try notifier.watchdogPing())
        #expect(try await receiver.nextMessage() == "WATCHDOG=1")
        #expect(try notifier.stopping(status: "stopping"))
        #expect(try await receiver.nextMessage() == "STOPPING=1\nSTATUS=stopping")
        #expect(try notifier.stopping())
        #expect(try await receiver.nextMessage() == "STOPPING=1")
    }

    @Test("a NOTIFY_SOCKET nobody listens on is an error")
    func unreachableManager() {
        let notifier = ServiceManagerNotifier(environment: ["NOTIFY_SOCKET": "/nonexistent-notifyd-test/notify.sock"])
        #expect(throws: SystemdError.self) { try notifier.watchdogPing() }
    }

    @Test("the watchdog comes from WATCHDOG_USEC, for this process only; pings at half the timeout")
    func watchdog() throws {
        let pid = getpid()
        #expect(try ServiceWatchdog.fromEnvironment([:], pid: pid) == nil)

        let watchdog = try #require(try ServiceWatchdog.fromEnvironment(["WATCHDOG_USEC": "500000"], pid: pid))
        #expect(watchdog.timeout == .milliseconds(500))
        #expect(watchdog.pingInterval == .milliseconds(250))

        #expect(try ServiceWatchdog.fromEnvironment(["WATCHDOG_USEC": "500000", "WATCHDOG_PID": "\(pid)"], pid: pid) == watchdog)
        #expect(
            try ServiceWatchdog.fromEnvironment(["WATCHDOG_USEC": "500000", "WATCHDOG_PID": "\(pid + 1)"], pid: pid) == nil,
            "a watchdog for another process is not ours")
        #expect(throws: SystemdError.self) { try ServiceWatchdog.fromEnvironment(["WATCHDOG_USEC": "soon"], pid: pid) }
    }

    @Test("error descriptions say what failed")
    func errorDescriptions() {
        #expect(SystemdError.notifyFailed(errno: ENOENT).description.contains("No such file or directory"))
        #expect(SystemdError.noUsableListenSocket(passed: 2).description.contains("ListenStream="))
    }
}
