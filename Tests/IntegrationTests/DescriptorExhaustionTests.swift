#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NIOCore
import NotifyWire
import NotifyTestSupport
import Testing

extension Integration {
    /// A daemon at its file descriptor limit keeps serving its clients, answers each new one at once with
    /// `ERROR unavailable` instead of leaving it waiting for `WELCOME`, does not spin on `accept`, logs it,
    /// and takes new clients again once descriptors are free.
    @Suite("Out of file descriptors")
    struct DescriptorExhaustionTests {
        /// What a new connection got for its `HELLO`.
        private enum Greeting {
            case welcome(TestClient)
            case refused(ErrorFrame)
        }

        private static func greet(_ path: String) async throws -> Greeting {
            let connection = try await TestClient.connect(to: path, name: "fd-exhaustion")
            // The daemon may have refused and closed the connection before the HELLO goes out: its ERROR is
            // still there to read.
            try? await connection.send(.hello(ClientFrame.Hello(clientName: connection.name)))
            switch try await connection.next() {
            case .welcome: return .welcome(connection)
            case .error(let error): return .refused(error)
            case let other: throw TestFailure("expected WELCOME or ERROR, got \(other.summary)")
            }
        }

        /// Connects clients to a daemon started under `ulimit -n 40` until one is refused: the ones served, and the
        /// refusal.
        private static func fillDescriptorTable(_ path: String) async throws -> (served: [TestClient], refusal: ErrorFrame) {
            var served: [TestClient] = []
            while true {
                try #require(served.count < 64, "40 descriptors and still no refusal after \(served.count) clients")
                switch try await greet(path) {
                case .welcome(let connection): served.append(connection)
                case .refused(let error): return (served, error)
                }
            }
        }

        @Test("at the descriptor limit new clients get ERROR unavailable at once, others go on, and it recovers")
        func refusesAtTheLimit() async throws {
            try await withIntegrationScope { scope in
                let child = try await DaemonProcess.start(socketPath: scope.socketPath) {
                    try scope.launch($0, $1, after: "ulimit -n 40")
                }.child

                // Fill the daemon's descriptor table with clients that got WELCOME.
                let (filled, refusal) = try await Self.fillDescriptorTable(scope.socketPath)
                var served = filled
                #expect(refusal.code == .unavailable && refusal.closesConnection, "\(refusal)")
                #expect(refusal.message.contains("file descriptor"), "\(refusal.message)")

                // Every further client is answered too (the reserve descriptor came back each time).
                for attempt in 1...20 {
                    guard case .refused(let error) = try await Self.greet(scope.socketPath) else {
                        Issue.record("client \(attempt) after the limit got WELCOME")
                        continue
                    }
                    #expect(error.code == .unavailable, "\(error)")
                }
                // notifyctl says why.
                let post = try await scope.run(.notifyctl, ["post", "a.b", "x", "--socket", scope.socketPath])
                #expect(post.termination != .exited(0), "\(post.diagnostics)")
                #expect(post.stderrLines.contains { $0.contains("file descriptor") }, "\(post.diagnostics)")

                // The clients it serves are served all along.
                for connection in served.prefix(3) {
                    guard case .pong = try await connection.request({ .ping(requestID: $0) }).reply else {
                        Issue.record("a served client got no PONG")
                        continue
                    }
                }

                // Descriptors freed: new clients are welcome again.
                for connection in served { await connection.close() }
                served.removeAll()
                var recovered: TestClient?
                _ = try await poll("a new client to get WELCOME after the others left", timeout: 20) { () throws -> Bool? in
                    if case .welcome(let connection) = try await Self.greet(scope.socketPath) { recovered = connection }
                    return recovered != nil ? true : nil
                }
                let status = try await #require(recovered).query(DaemonStatus.self, .status)
                let refused = try #require(status.connectionsRefused)
                let failures = try #require(status.acceptFailures)
                #expect(refused >= 22, "connections_refused \(refused)")
                // Each failed accept refuses the whole queue and pauses: no spinning on EMFILE.
                #expect(failures >= 1 && failures <= refused + 5, "accept_failures \(failures), connections_refused \(refused)")
                let reports = child.stderrLines.filter { $0.contains("out of file descriptors") }
                #expect((1...3).contains(reports.count), "\(reports.count) reports\n\(child.diagnostics)")
            }
        }

        @Test("at the descriptor limit the watchdog's pings go on: systemd does not kill a daemon that serves its clients")
        func watchdogAtTheLimit() async throws {
            try await withIntegrationScope { scope in
                let manager = try ServiceManagerSocket(path: scope.directory + "/manager.sock")
                // Watchdog timeout 500 ms: a ping every 250 ms.
                let child = try await DaemonProcess.start(socketPath: scope.socketPath) {
                    try scope.launch(
                        $0, $1,
                        after: "ulimit -n 40; export NOTIFY_SOCKET='\(manager.path)' WATCHDOG_USEC=500000; unset WATCHDOG_PID")
                }.child
                try await manager.waitForMessage("READY=1") { $0.notifyAssignments["READY"] == "1" }

                let (served, _) = try await Self.fillDescriptorTable(scope.socketPath)
                // The table is full (the reserve is taken back after each refusal): every ping from now on is sent
                // at the limit.
                _ = manager.drain()
                let window = try await manager.collect(for: 2)
                let pings = window.filter { $0 == "WATCHDOG=1" }.count
                #expect(pings >= 3, "expected at least 3 WATCHDOG=1 in 2 s at the limit, got \(window)\n\(child.diagnostics)")
                #expect(
                    !child.stderrLines.contains { $0.contains("cannot ping the service manager's watchdog") },
                    "\(child.diagnostics)")
                for connection in served { await connection.close() }
            }
        }

        /// The CPU time `pid` has used so far, in clock ticks (`/proc/PID/stat`: utime + stime).
        private static func cpuTicks(of pid: Int32) throws -> Int {
            let text = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
            // The fields after the command name (which may hold spaces), from the third on.
            let fields = try #require(text.split(separator: ")").last).split(separator: " ")
            return try #require(Int(fields[11])) + #require(Int(fields[12]))
        }

        @Test("at the descriptor limit a scraper waiting on the metrics socket does not make the daemon spin")
        func metricsListenerAtTheLimit() async throws {
            try await withIntegrationScope { scope in
                let metrics = scope.directory + "/metrics.sock"
                let child = try await DaemonProcess.start(socketPath: scope.socketPath, options: ["--metrics-socket", metrics]) {
                    try scope.launch($0, $1, after: "ulimit -n 40")
                }.child
                let (served, _) = try await Self.fillDescriptorTable(scope.socketPath)
                // Scrapers in the metrics listener's queue, which the daemon cannot accept now.
                let scrapers = try (0..<3).map { _ in try UnixSocketAddress.connectedDescriptor(metrics) }
                defer { for scraper in scrapers { close(scraper) } }
                // What is counted is CPU, not speed: a listener retrying accept at every turn of the loop burns the
                // whole window (about 200 ticks in 2 s); one that backs off uses next to none.
                let before = try Self.cpuTicks(of: child.pid)
                try await Task.sleep(for: .seconds(2))
                let used = try Self.cpuTicks(of: child.pid) - before
                #expect(used < 60, "the daemon used \(used) clock ticks of CPU in 2 s, at the limit with scrapers waiting")
                // Descriptors freed: the scrapers are served.
                for connection in served { await connection.close() }
                var timeout = timeval(tv_sec: Int(TestScale.timeout(20)), tv_usec: 0)
                _ = setsockopt(scrapers[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                var reply = [UInt8](repeating: 0, count: 64)
                let count = read(scrapers[0], &reply, reply.count)
                #expect(count > 0, "the first scraper got no metrics once descriptors were free (errno \(errno))")
            }
        }

        /// The soft and hard limits on open files in `/proc/PID/limits`.
        private static func openFileLimits(of pid: Int32) throws -> (soft: String, hard: String) {
            let text = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
            let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("Max open files") }, "\(text)")
            let fields = line.dropFirst("Max open files".count).split(separator: " ")
            try #require(fields.count >= 2, "\(line)")
            return (String(fields[0]), String(fields[1]))
        }

        @Test("started with a soft open-file limit below the hard one, the daemon raises it to the hard one")
        func raisesSoftLimit() async throws {
            var limit = rlimit()
            #expect(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0)
            try #require(limit.rlim_max > 256, "the hard limit \(limit.rlim_max) leaves no room to test")
            try await withIntegrationScope { scope in
                let daemon = try await DaemonProcess.start(socketPath: scope.socketPath) {
                    try scope.launch($0, $1, after: "ulimit -S -n 256")
                }
                let limits = try Self.openFileLimits(of: daemon.pid)
                #expect(limits.soft == limits.hard, "notifyd runs with \(limits.soft) of \(limits.hard) descriptors")
                #expect(limits.soft != "256")
            }
        }
    }
}

extension Integration {
    /// A client that sends requests without reading their replies: the daemon stops serving its requests once its
    /// replies reach the bound, whatever it has already received (a QUERY's answer can be large).
    @Suite("Replies to a client that does not read")
    struct UnreadRepliesTests {
        @Test("2,000 pipelined QUERY status, never read: the replies queued stay within the bound plus one answer")
        func repliesStayBounded() async throws {
            try await withIntegrationScope { scope in
                let limit = 65_536
                let daemon = try await scope.startOpenDaemon(["--outbound-limit", "\(limit)"])
                let watcher = try await TestClient.connect(to: scope.socketPath, name: "watcher")
                try await watcher.hello()
                let answer = try await watcher.query(DaemonStatus.self, .status)
                // Answers ≈ 1.5 MB.
                let greedy = try await connectUnreadQuerier(to: scope.socketPath, name: "greedy", queries: 2_000)
                // Wait until the daemon has served the greedy client up to its bound (the answers first fill the
                // socket's buffer, served a slice per turn) and stopped (its pending bytes no longer grow).
                var readings: [Int] = []
                _ = try await poll("the greedy client's pending bytes to reach half the bound and settle", timeout: 60,
                                   interval: .milliseconds(50)) { () throws -> Bool? in
                    let clients = try await watcher.query([DaemonClient].self, .clients)
                    guard let entry = clients.first(where: { $0.clientName == "greedy" }) else { return nil }
                    readings.append(entry.pendingBytes)
                    guard entry.pendingBytes >= limit / 2 else { return nil }
                    return readings.count >= 3 && readings.suffix(3).allSatisfy({ $0 == entry.pendingBytes }) ? true : nil
                }
                let answerSize = try JSONEncoder().encode(answer).count + 64
                #expect(readings.last! <= limit + 2 * answerSize, "\(readings.last!) bytes queued for a client that reads nothing")
                withExtendedLifetime(greedy) {}
                _ = daemon
            }
        }
    }
}
