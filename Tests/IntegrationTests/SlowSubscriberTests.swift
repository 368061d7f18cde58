#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport
import Testing

extension Integration {
    /// A slow subscriber with the real binaries: a SIGSTOPped `notifyctl listen` while a flood is posted, under
    /// each policy.
    @Suite("Slow subscribers under a flood")
    struct SlowSubscriberTests {
        /// The daemon's per-connection bound in these tests (`--outbound-limit`).
        static let outboundLimit = 1 << 20
        /// Posts per flood: 1,000,000 (30–50 s per scenario with the debug daemon on 2 CPUs);
        /// 50,000 under ThreadSanitizer (`make sanitize`), which slows the daemon and the test process several
        /// times. `NOTIFYD_FLOOD_POSTS=N` overrides both (a multiple of 10).
        static let floodTotal: Int = {
            if let text = ProcessInfo.processInfo.environment["NOTIFYD_FLOOD_POSTS"], let value = Int(text), value >= 50_000 {
                return value / 10 * 10
            }
            return runningUnderThreadSanitizer ? 50_000 : 1_000_000
        }()
        /// A generous fixed ceiling for the daemon's peak resident memory: far above what the bounds allow, far
        /// below what an unbounded queue for the stopped subscriber would take.
        static let residentCeiling: UInt64 = 200 << 20

        // MARK: The stopped subscriber

        /// What one run of the slow-subscriber scenario produced.
        struct SlowRun {
            var listen: ChildProcess
            var status: JSONObject
            /// The stopped listener's entry in `notifyctl clients --json`, taken after the flood, before SIGCONT.
            var listener: [String: Any]?
            var lines: [ListenLine]
            var flood: Flood
        }

        /// The scenario: a `notifyctl listen --json --policy POLICY` over the flood's names is stopped
        /// with SIGSTOP while the flood is posted; a raw reader of the same names must receive everything, the
        /// poster must finish, the daemon's memory must stay within what its bounds allow. Then the listener is
        /// continued (for `disconnect`, as soon as the daemon disconnects it: the daemon waits only 10 s for a
        /// disconnected client to read its last bytes) and `finish` waits for what it must receive.
        static func slowSubscriber(
            policy: String, continueWhenDisconnected: Bool = false,
            finish: @escaping @Sendable (ChildProcess, Flood) async throws -> Void
        ) async throws -> SlowRun {
            try await withIntegrationScope { scope in
                let daemon = try await scope.startOpenDaemon(["--outbound-limit", "\(outboundLimit)"])
                let socket = scope.socketPath
                let flood = Flood(prefix: "flood", nameCount: 10, total: floodTotal)

                let reader = FloodReader()
                let readerTask = Task { try await reader.run(flood, path: socket) }
                _ = try await poll("the raw reader to subscribe", timeout: 20) { reader.isReady ? true : nil }
                let listen = try scope.launch(
                    .notifyctl, ["listen"] + flood.names + ["--json", "--policy", policy, "--socket", socket])
                try await listen.waitForLine(containing: "listening for", on: .stderr)
                listen.send(SIGSTOP)

                let started = ContinuousClock.now
                let poster = Task {
                    try await flood.post(to: socket, pacedBy: reader)
                }
                if continueWhenDisconnected {
                    try await daemon.waitForLine(containing: "disconnecting slow consumer", on: .stderr, timeout: 90)
                    listen.send(SIGCONT)
                    // Once it has reported the disconnection, the listener (which reconnects by itself) has done its
                    // part; stop it so that it does not compete with the flood for the two CPUs.
                    try await finish(listen, flood)
                    listen.send(SIGTERM)
                }
                try await withTimeout(100, "the poster to finish \(flood.total) posts") { try await poster.value }
                let postSeconds = Double((ContinuousClock.now - started).components.seconds)
                try await withTimeout(100, "the raw reader to receive every notification") { try await readerTask.value }
                let reception = reader.reception
                #expect(reception.problems.isEmpty, "the raw reader: \(reception.problems)")
                #expect(
                    reception.received == flood.total && reception.lost == 0,
                    "another subscriber receives everything: \(reception.received) notifications, \(reception.lost) lost")

                // Memory, while the listener is still stopped (or, for disconnect, gone).
                let statusRun = try await scope.run(.notifyctl, ["status", "--json", "--socket", socket])
                #expect(statusRun.termination == .exited(0), "\(statusRun.diagnostics)")
                let status = try JSONObject(line: try #require(statusRun.stdoutLines.first))
                let outbound = try status.int("outbound_bytes")
                let held = try status.int("held_bytes")
                #expect(try status.int("posts") == flood.total)
                #expect(outbound <= outboundLimit, "pending bytes within --outbound-limit: \(outbound)")
                #expect(held <= outboundLimit, "held bytes within the per-connection bound: \(held)")
                #expect(outbound + held <= 2 * outboundLimit, "the daemon holds at most pending + held for the stopped client")
                let resident = UInt64(try status.int("resident_memory_bytes"))
                let peak = try procStatusBytes(pid: daemon.pid, "VmHWM")
                #expect(resident > 0 && resident <= residentCeiling, "resident memory \(resident >> 20) MiB")
                #expect(peak <= residentCeiling, "peak resident memory \(peak >> 20) MiB (VmHWM)")
                print("flood (\(policy)): \(flood.total) posts in \(postSeconds) s; daemon peak RSS \(peak >> 20) MiB, outbound \(outbound) B, held \(held) B")

                let clients = try jsonArray(printedBy: try await scope.run(.notifyctl, ["clients", "--json", "--socket", socket]))
                let listener = clients.first { ($0["pid"] as? Int) == Int(listen.pid) }

                if !continueWhenDisconnected {
                    listen.send(SIGCONT)
                    try await finish(listen, flood)
                    listen.send(SIGTERM)
                }
                _ = try await listen.waitForExit(timeout: 20)
                let lines = try listen.stdoutLines.map(ListenLine.init)
                try await scope.stopDaemon(daemon)
                return SlowRun(listen: listen, status: status, listener: listener, lines: lines, flood: flood)
            }
        }

        /// Waits until the listener printed the last post of every name of the flood.
        static func waitForFinalValues(_ listen: ChildProcess, _ flood: Flood) async throws {
            let needles = flood.names.map { #""name":"\#($0)""# }
            let final = #""payload":"\#(flood.finalPayload)""#
            _ = try await listen.wait(for: "the last value of every name", timeout: 60) { state in
                let tail = state.stdout.lines.suffix(5_000).filter { $0.contains(final) }
                return needles.allSatisfy { needle in tail.contains { $0.contains(needle) } } ? true : nil
            }
        }

        static func checkOrder(_ lines: [ListenLine]) {
            var last: UInt64 = 0
            for line in lines {
                if line.sequence <= last {
                    Issue.record("sequence numbers must strictly increase: \(line) after #\(last)")
                    return
                }
                last = line.sequence
            }
        }

        @Test("coalesce: the stopped subscriber, continued, receives the latest value of each name with a merge count")
        func coalesce() async throws {
            let run = try await Self.slowSubscriber(policy: "coalesce") { listen, flood in
                try await Self.waitForFinalValues(listen, flood)
            }
            let lines = run.lines
            Self.checkOrder(lines)
            for name in run.flood.names {
                let last = try #require(lines.last { $0.name == name }, "\(name) was never received")
                #expect(last.payload == run.flood.finalPayload, "\(name): the final value is the last posted")
                #expect(last.merged > 0, "\(name): the latest value carries a merge count: \(last)")
            }
            let merged = lines.reduce(0) { $0 + $1.merged }
            #expect(UInt64(lines.count) + merged == UInt64(run.flood.total), "every post is received or counted as merged")
            #expect(run.listener?["merged"] as? Int == Int(merged), "introspection counts the merges the subscriber was told of")
            #expect(try run.status.int("merged") >= Int(merged))
            #expect(lines.allSatisfy { $0.droppedBefore == 0 }, "coalesce drops nothing")
        }

        @Test("queue:N: the stopped subscriber, continued, receives an explicit drop notice and at most N per name after it")
        func queue() async throws {
            let limit = 50
            let run = try await Self.slowSubscriber(policy: "queue:\(limit)") { listen, flood in
                try await Self.waitForFinalValues(listen, flood)
            }
            let lines = run.lines
            Self.checkOrder(lines)
            for name in run.flood.names {
                let ofName = lines.filter { $0.name == name }
                let gap = try #require(ofName.firstIndex { $0.droppedBefore > 0 }, "\(name): no notification says notifications were dropped")
                #expect(ofName.count - gap <= limit, "\(name): \(ofName.count - gap) after the gap, limit \(limit)")
                #expect(ofName.last?.payload == run.flood.finalPayload, "\(name): the last value arrives")
                #expect(ofName.allSatisfy { $0.merged == 0 })
            }
            let dropped = lines.reduce(0) { $0 + $1.droppedBefore }
            #expect(UInt64(lines.count) + dropped == UInt64(run.flood.total), "every post is received or counted as dropped")
            #expect(run.listener?["dropped"] as? Int == Int(dropped), "introspection counts the drops the subscriber was told of")
            #expect(try run.status.int("dropped") >= Int(dropped))
            let notices = run.listen.stderrLines.filter { $0.contains("daemon dropped") }
            #expect(Set(notices.compactMap { $0.split(separator: " ").last.map(String.init) }) == Set(run.flood.names), "\(notices)")
        }

        @Test("disconnect: the stopped subscriber is disconnected with slow-consumer and told why")
        func disconnect() async throws {
            let run = try await Self.slowSubscriber(policy: "disconnect", continueWhenDisconnected: true) { listen, _ in
                try await listen.waitForLine(containing: "slow-consumer", on: .stderr, timeout: 30)
            }
            let line = try #require(run.listen.stderrLines.first { $0.contains("slow-consumer") })
            #expect(line.contains("notifyctl: disconnected: daemon closed the connection: slow-consumer: "), "\(line)")
            #expect(
                line.contains("the client did not read its notifications fast enough (over \(Self.outboundLimit) bytes pending)"),
                "\(line)")
            #expect(line.contains("asked to be disconnected"), "\(line)")
            #expect(try run.status.int("slow_consumer_disconnects") >= 1)
            Self.checkOrder(run.lines)
            #expect(run.lines.allSatisfy { $0.merged == 0 && $0.droppedBefore == 0 })
        }
    }
}
