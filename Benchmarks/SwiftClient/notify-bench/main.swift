// notify-bench: the benchmark client built on the Notify library (what users of notifyd get).
//
// The same roles and board protocol as the C driver `nbench` (Benchmarks/C/nbench.c), so the orchestrator
// (Benchmarks/run.py) can mix them: sub, pub, ping, pong, plus inproc (process-local `self.` names).
// `--target queue|immediate` chooses the delivery target of the observations (default: a serial DispatchQueue).
// Every role prints one JSON object.
import CBenchSupport
import Dispatch
import Histogram
import Notify

let arguments = Arguments()

func connect(_ arguments: Arguments) async throws -> NotifyCenter {
    let configuration = NotifyCenter.Configuration(
        socketPath: arguments.string("address"), clientName: "notify-bench", reconnect: .never)
    return try await NotifyCenter.connect(configuration: configuration)
}

func deliveryTarget(_ arguments: Arguments, label: String) -> DeliveryTarget {
    switch arguments.string("target", "queue") {
    case "queue": return .queue(DispatchQueue(label: label))
    case "immediate": return .immediate
    case let other: fail("--target must be queue or immediate, got '\(other)'")
    }
}

func perOperation(_ before: UInt64?, _ after: UInt64?, _ count: UInt64) -> String {
    guard let before, let after, count > 0 else { return "null" }
    return format2(Double(after - before) / Double(count))
}

func format2(_ value: Double) -> String {
    let scaled = (value * 100).rounded() / 100
    return "\(scaled)"
}

// MARK: sub

func runSub(_ arguments: Arguments) async throws {
    let board = Board(path: arguments.string("board"))
    let slot = arguments.int("slot", 0)
    let name = arguments.string("name", "bench.fan")
    let center = try await connect(arguments)
    let observation = try center.observe(name, on: deliveryTarget(arguments, label: "bench.sub")) { note in
        board.add(slot, .received, 1)
        let lost = note.mergedCount + note.droppedBefore
        if lost > 0 { board.add(slot, .merged, lost) }
    }
    try await center.synchronize()
    let allocationsBefore = allocationCount()
    board.store(slot, .ready, 1)
    while !board.isStopped {
        try await Task.sleep(for: .milliseconds(20))
    }
    let allocationsAfter = allocationCount()
    let received = board.load(slot, .received)
    observation.cancel()
    print(
        "{\"role\":\"sub\",\"client\":\"swift\",\"slot\":\(slot),\"received\":\(received),"
            + "\"lost\":\(board.load(slot, .merged)),\"allocs_per_note\":\(perOperation(allocationsBefore, allocationsAfter, received))}")
    await center.close()
}

// MARK: pub

func runPub(_ arguments: Arguments) async throws {
    let board = Board(path: arguments.string("board"))
    let subscribers = arguments.int("subs", 1)
    let ignored = arguments.int("ignore-slot", Int.max)
    let name = arguments.string("name", "bench.fan")
    let target = UInt64(arguments.int("posts", 100_000))
    let window = UInt64(arguments.int("window", 1_000))
    let batch = UInt64(arguments.int("batch", 64))
    let maxSeconds = arguments.double("max-seconds", 5)
    let payload = [UInt8](repeating: 0x78, count: arguments.int("payload", 64))
    let center = try await connect(arguments)
    board.waitUntilReady(subscribers)
    let active = (0..<subscribers).filter { $0 != ignored }
    let base = (0..<subscribers).map { board.load($0, .received) }
    func progress() -> UInt64 {
        active.map { board.load($0, .received) - base[$0] }.min() ?? 0
    }
    let allocationsBefore = allocationCount()
    let start = bench_now_ns()
    let stopAt = start + UInt64(maxSeconds * 1e9)
    var posted: UInt64 = 0
    posting: while posted < target {
        let done = min(progress(), posted)
        let inFlight = posted - done
        if inFlight >= window {
            bench_sleep_us(20)
            if bench_now_ns() > stopAt { break posting }
            continue
        }
        let count = min(window - inFlight, batch, target - posted)
        for _ in 0..<count {
            try center.post(name, payload: payload)
        }
        posted += count
        if bench_now_ns() > stopAt { break }
    }
    let postingEnd = bench_now_ns()
    let allocationsAfter = allocationCount()
    var lastDone: UInt64 = 0
    var lastChange = bench_now_ns()
    var complete = false
    while true {
        let done = progress()
        if done >= posted {
            complete = true
            break
        }
        let now = bench_now_ns()
        if done != lastDone {
            lastDone = done
            lastChange = now
        }
        if now - lastChange > 5_000_000_000 { break }
        bench_sleep_us(20)
    }
    let end = bench_now_ns()
    board.stop()
    let delivered = active.reduce(UInt64(0)) { $0 + board.load($1, .received) - base[$1] }
    let lost = active.reduce(UInt64(0)) { $0 + board.load($1, .merged) }
    let seconds = Double(end - start) / 1e9
    print(
        "{\"role\":\"pub\",\"client\":\"swift\",\"subscribers\":\(subscribers),\"active\":\(active.count),"
            + "\"payload\":\(payload.count),\"posted\":\(posted),\"expected\":\(posted * UInt64(active.count)),"
            + "\"delivered\":\(delivered),\"lost\":\(lost),\"seconds\":\(seconds),"
            + "\"posting_seconds\":\(Double(postingEnd - start) / 1e9),"
            + "\"delivered_per_s\":\(Double(delivered) / seconds),\"posts_per_s\":\(Double(posted) / seconds),"
            + "\"complete\":\(complete),\"allocs_per_post\":\(perOperation(allocationsBefore, allocationsAfter, posted))}")
    await center.close()
}

// MARK: ping / pong

/// The round-trip loop's state. `@unchecked Sendable`: after setup it is only touched by the pong observation's
/// handler, whose invocations never overlap (every delivery target runs one observation's handlers one at a
/// time), and the setup happens before the first ping is posted, hence before any handler can run.
final class PingLoop: @unchecked Sendable {
    let total: Int
    let warmup: Int
    let deadline: UInt64
    var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)
    var count = 0
    var sentAt: UInt64 = 0
    var finished: CheckedContinuation<Void, Never>?

    init(total: Int, warmup: Int, maxSeconds: Double) {
        self.total = total
        self.warmup = warmup
        self.deadline = bench_now_ns() + UInt64(maxSeconds * 1e9)
    }

    /// Records one round trip; returns whether to send the next ping.
    func pongArrived() -> Bool {
        let now = bench_now_ns()
        count += 1
        if count > warmup { histogram.record(now - sentAt) }
        let samples = count - warmup
        if count >= total || (now > deadline && samples >= 1_000) {
            finished?.resume()
            finished = nil
            return false
        }
        sentAt = bench_now_ns()
        return true
    }
}

func runPing(_ arguments: Arguments) async throws {
    let board = Board(path: arguments.string("board"))
    let slot = arguments.int("slot", 0)
    let payload = [UInt8](repeating: 0x70, count: arguments.int("payload", 64))
    let iterations = arguments.int("iterations", 20_000)
    let loop = PingLoop(
        total: arguments.int("warmup", 2_000) + iterations, warmup: arguments.int("warmup", 2_000),
        maxSeconds: arguments.double("max-seconds", 10))
    let center = try await connect(arguments)
    let observation = try center.observe("bench.pong", on: deliveryTarget(arguments, label: "bench.ping")) { _ in
        if loop.pongArrived() { try? center.post("bench.ping", payload: payload) }
    }
    try await center.synchronize()
    board.store(slot, .ready, 1)
    board.waitUntilReady(arguments.int("slots", 2), timeoutSeconds: 60)
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        loop.finished = continuation
        loop.sentAt = bench_now_ns()
        do {
            try center.post("bench.ping", payload: payload)
        } catch {
            fail("cannot post: \(error)")
        }
    }
    board.stop()
    observation.cancel()
    let histogram = loop.histogram
    func microseconds(_ percentile: Double) -> String { format2(Double(histogram.valueAtPercentile(percentile)) / 1e3) }
    print(
        "{\"role\":\"ping\",\"client\":\"swift\",\"payload\":\(payload.count),\"samples\":\(histogram.totalCount),"
            + "\"p50_us\":\(microseconds(50)),\"p99_us\":\(microseconds(99)),\"p999_us\":\(microseconds(99.9)),"
            + "\"max_us\":\(format2(Double(histogram.max) / 1e3)),\"mean_us\":\(format2(histogram.mean / 1e3))}")
    await center.close()
}

func runPong(_ arguments: Arguments) async throws {
    let board = Board(path: arguments.string("board"))
    let slot = arguments.int("slot", 1)
    let center = try await connect(arguments)
    let answered = AtomicCounter()
    let observation = try center.observe("bench.ping", on: deliveryTarget(arguments, label: "bench.pong")) { note in
        try? center.post("bench.pong", payload: note.payload)
        answered.add(1)
    }
    try await center.synchronize()
    board.store(slot, .ready, 1)
    while !board.isStopped {
        try await Task.sleep(for: .milliseconds(20))
    }
    observation.cancel()
    print("{\"role\":\"pong\",\"client\":\"swift\",\"answered\":\(answered.value)}")
    await center.close()
}

// MARK: inproc

/// Process-local delivery: posts to a `self.` name, handled in this process with no daemon involved.
func runInProcess(_ arguments: Arguments) async throws {
    let target = UInt64(arguments.int("posts", 500_000))
    let window = UInt64(arguments.int("window", 10_000))
    let payload = [UInt8](repeating: 0x69, count: arguments.int("payload", 64))
    let maxSeconds = arguments.double("max-seconds", 5)
    // No daemon is needed for `self.` names; the center's connection attempt fails once and is not retried.
    let center = NotifyCenter(
        configuration: .init(
            socketPath: arguments.string("address", "/nonexistent/notifyd.sock"), clientName: "notify-bench",
            reconnect: .never))
    let delivered = AtomicCounter()
    let observation = try center.observe("self.bench.inproc", on: deliveryTarget(arguments, label: "bench.inproc")) { _ in
        delivered.add(1)
    }
    let allocationsBefore = allocationCount()
    let start = bench_now_ns()
    let stopAt = start + UInt64(maxSeconds * 1e9)
    var posted: UInt64 = 0
    while posted < target {
        if posted - delivered.value >= window {
            bench_sleep_us(10)
            if bench_now_ns() > stopAt { break }
            continue
        }
        try center.post("self.bench.inproc", payload: payload)
        posted += 1
    }
    while delivered.value < posted { bench_sleep_us(10) }
    let end = bench_now_ns()
    let allocationsAfter = allocationCount()
    observation.cancel()
    let seconds = Double(end - start) / 1e9
    print(
        "{\"role\":\"inproc\",\"client\":\"swift\",\"target\":\"\(arguments.string("target", "queue"))\","
            + "\"payload\":\(payload.count),\"posted\":\(posted),\"delivered\":\(delivered.value),\"seconds\":\(seconds),"
            + "\"delivered_per_s\":\(Double(delivered.value) / seconds),"
            + "\"allocs_per_note\":\(perOperation(allocationsBefore, allocationsAfter, posted))}")
    await center.close()
}

do {
    switch arguments.role {
    case "sub": try await runSub(arguments)
    case "pub": try await runPub(arguments)
    case "ping": try await runPing(arguments)
    case "pong": try await runPong(arguments)
    case "inproc": try await runInProcess(arguments)
    default: fail("unknown role '\(arguments.role)'")
    }
} catch {
    fail("\(error)")
}
