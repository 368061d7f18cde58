import CBenchSupport

/// The shared-memory board through which the orchestrator, posters and subscribers coordinate
/// (`Benchmarks/C/bench.h`).
///
/// `@unchecked Sendable`: the pointer refers to a shared mapping that lives until the process exits, and every
/// access goes through the C helpers' atomic loads, stores and adds, so using it from several threads is safe.
struct Board: @unchecked Sendable {
    let base: UnsafeMutablePointer<UInt64>

    init(path: String) {
        guard let base = bench_board_open(path) else { fail("cannot map the board file \(path)") }
        self.base = base
    }

    enum Field: Int32 {
        case ready = 0, received = 1, command = 2, errors = 3, merged = 4
    }

    func load(_ slot: Int, _ field: Field) -> UInt64 { bench_load(bench_slot_field(base, slot, field.rawValue)) }
    func store(_ slot: Int, _ field: Field, _ value: UInt64) { bench_store(bench_slot_field(base, slot, field.rawValue), value) }
    func add(_ slot: Int, _ field: Field, _ value: UInt64) { bench_add(bench_slot_field(base, slot, field.rawValue), value) }

    var isStopped: Bool { bench_load(bench_stop_flag(base)) != 0 }
    func stop() { bench_store(bench_stop_flag(base), 1) }

    /// Waits (blocking this thread) until slots `0..<count` are ready.
    func waitUntilReady(_ count: Int, timeoutSeconds: Double = 180) {
        let deadline = bench_now_ns() + UInt64(timeoutSeconds * 1e9)
        for slot in 0..<count {
            while load(slot, .ready) == 0 {
                if bench_now_ns() > deadline { fail("slot \(slot) never became ready") }
                bench_sleep_us(1_000)
            }
        }
    }
}

/// A counter in this process's memory, updated atomically (same reasoning as ``Board``).
struct AtomicCounter: @unchecked Sendable {
    private let pointer: UnsafeMutablePointer<UInt64>

    init() {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: 0)
    }

    var value: UInt64 { bench_load(pointer) }
    func add(_ amount: UInt64) { bench_add(pointer, amount) }
}

/// Heap allocations so far, when `libmalloccount.so` is preloaded.
func allocationCount() -> UInt64? {
    var counts: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    let available = withUnsafeMutablePointer(to: &counts) { pointer in
        pointer.withMemoryRebound(to: UInt64.self, capacity: 4) { bench_malloc_counts($0) }
    }
    return available != 0 ? counts.0 : nil
}
