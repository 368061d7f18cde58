#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifySystemd
import Testing

/// These tests change NOTIFY_SOCKET and WATCHDOG_* in the test process's environment, so they run one at a time;
/// no other test reads those variables.
@Suite("Service manager notifications", .serialized)
struct ServiceManagerNotifierTests {
    @Test("without NOTIFY_SOCKET nothing is sent and nothing fails")
    func noManager() throws {
        unsetenv("NOTIFY_SOCKET")
        let notifier = ServiceManagerNotifier()
        #expect(try notifier.ready(status: "x") == false)
        #expect(try notifier.watchdogPing() == false)
        #expect(try notifier.stopping() == false)
    }

    @Test("messages arrive as preformatted assignments; a status is flattened to one line")
    func messages() throws {
        let receiver = try DatagramReceiver()
        defer { receiver.close() }
        setenv("NOTIFY_SOCKET", receiver.path, 1)
        defer { unsetenv("NOTIFY_SOCKET") }
        let notifier = ServiceManagerNotifier()

        #expect(try notifier.ready(status: "2 connections,\n1 subscription", mainPID: 4242))
        #expect(try receiver.receive() == "READY=1\nSTATUS=2 connections, 1 subscription\nMAINPID=4242")
        #expect(try notifier.status("idle"))
        #expect(try receiver.receive() == "STATUS=idle")
        #expect(try notifier.watchdogPing())
        #expect(try receiver.receive() == "WATCHDOG=1")
        #expect(try notifier.stopping(status: "stopping"))
        #expect(try receiver.receive() == "STOPPING=1\nSTATUS=stopping")
        #expect(try notifier.stopping())
        #expect(try receiver.receive() == "STOPPING=1")
    }

    @Test("a NOTIFY_SOCKET nobody listens on is an error")
    func unreachableManager() {
        setenv("NOTIFY_SOCKET", "/nonexistent-notifyd-test/notify.sock", 1)
        defer { unsetenv("NOTIFY_SOCKET") }
        #expect(throws: SystemdError.self) { try ServiceManagerNotifier().watchdogPing() }
    }

    @Test("the watchdog comes from WATCHDOG_USEC, for this process only; pings at half the timeout")
    func watchdog() throws {
        defer {
            unsetenv("WATCHDOG_USEC")
            unsetenv("WATCHDOG_PID")
        }
        unsetenv("WATCHDOG_USEC")
        unsetenv("WATCHDOG_PID")
        #expect(try ServiceWatchdog.fromEnvironment() == nil)

        setenv("WATCHDOG_USEC", "500000", 1)
        let watchdog = try #require(try ServiceWatchdog.fromEnvironment())
        #expect(watchdog.timeout == .milliseconds(500))
        #expect(watchdog.pingInterval == .milliseconds(250))

        setenv("WATCHDOG_PID", "\(getpid())", 1)
        #expect(try ServiceWatchdog.fromEnvironment() == watchdog)
        setenv("WATCHDOG_PID", "\(getpid() + 1)", 1)
        #expect(try ServiceWatchdog.fromEnvironment() == nil, "a watchdog for another process is not ours")

        unsetenv("WATCHDOG_PID")
        setenv("WATCHDOG_USEC", "soon", 1)
        #expect(throws: SystemdError.self) { try ServiceWatchdog.fromEnvironment() }
    }

    @Test("error descriptions say what failed")
    func errorDescriptions() {
        #expect(SystemdError.notifyFailed(errno: ENOENT).description.contains("No such file or directory"))
        #expect(SystemdError.noUsableListenSocket(passed: 2).description.contains("ListenStream="))
    }
}
