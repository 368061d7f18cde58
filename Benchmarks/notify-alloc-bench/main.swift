// notify-alloc-bench: heap allocations (and time) per operation on the hot paths of the wire protocol, to
// catch regressions. Run it with Benchmarks/C's libmalloccount.so preloaded (Benchmarks/run.py does):
//
//   LD_PRELOAD=Benchmarks/C/build/libmalloccount.so notify-alloc-bench [--iterations N]
//
// Without the preload it still runs and reports times, with allocations as null. The daemon's routing path is
// internal to NotifyServer; its allocations are measured on the running daemon instead (run.py, "allocations").
//
// A target of the root package (../../Package.swift), not of the benchmark package beside it
// (Benchmarks/Package.swift): what it measures is NotifyWire, which is no product of the root package (and is
// becoming `package`-access), so only a target of the root package can import it. It needs nothing but NotifyWire
// and NIOCore, and no C helper (the two it used from CBenchSupport are written out above and below), so the root
// package keeps no benchmark dependency (BENCHMARKS.md, "Where the benchmarks live").
import NIOCore
import NotifyWire

#if canImport(Glibc)
import Glibc
#endif

var iterations = 20_000
if let index = CommandLine.arguments.firstIndex(of: "--iterations"), index + 1 < CommandLine.arguments.count,
    let value = Int(CommandLine.arguments[index + 1])
{
    iterations = value
}

/// libmalloccount.so's `malloccount_read(uint64_t out[4])` when it is preloaded (allocations, reallocs, frees,
/// bytes), found as CBenchSupport's `bench_malloc_counts` finds it; nil without the preload.
typealias MallocCountRead = @convention(c) (UnsafeMutablePointer<UInt64>) -> Void
let mallocCountRead: MallocCountRead? = dlsym(nil, "malloccount_read").map { unsafeBitCast($0, to: MallocCountRead.self) }

func allocations() -> UInt64? {
    guard let mallocCountRead else { return nil }
    var counts: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)  // on the stack: reading counts no allocation
    withUnsafeMutablePointer(to: &counts) { pointer in
        pointer.withMemoryRebound(to: UInt64.self, capacity: 4) { mallocCountRead($0) }
    }
    return counts.0
}

/// CLOCK_MONOTONIC in nanoseconds.
func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// Keeps the optimiser from removing work whose result is otherwise unused.
@inline(never)
func consume<T>(_ value: T) {
    withExtendedLifetime(value) {}
}

/// Runs `body` (which performs `operations` operations) once to warm up and once measured.
func measure(_ name: String, operations: Int, _ body: () throws -> Void) rethrows {
    try body()
    let allocationsBefore = allocations()
    let start = now()
    try body()
    let end = now()
    let allocationsAfter = allocations()
    let perOperation: String
    if let allocationsBefore, let allocationsAfter {
        perOperation = "\(Double(allocationsAfter - allocationsBefore) / Double(operations))"
    } else {
        perOperation = "null"
    }
    let nanoseconds = Double(end - start) / Double(operations)
    print("{\"case\":\"\(name)\",\"operations\":\(operations),\"allocs_per_op\":\(perOperation),\"ns_per_op\":\(nanoseconds)}")
}

let allocator = ByteBufferAllocator()
let name = "bench.fan"
let longName = "org.example.benchmarks.fan-out.notification"
let payload = ByteBuffer(repeating: 0x78, count: 64)
let sender = SenderCredentials(pid: 1234, uid: 1000, gid: 100)

func postFrames(name: String, count: Int) -> ByteBuffer {
    var buffer = allocator.buffer(capacity: count * 96)
    for index in 0..<count {
        ClientFrame.post(.init(requestID: UInt32(index + 1), name: name, payload: payload)).encode(into: &buffer)
    }
    return buffer
}

func notificationFrames(name: String, count: Int) -> ByteBuffer {
    var buffer = allocator.buffer(capacity: count * 112)
    for index in 0..<count {
        NotificationFrame.encode(sequence: UInt64(index + 1), sender: sender, name: name, payload: payload, into: &buffer)
    }
    return buffer
}

/// A copy of `buffer` in new storage, as a socket read delivers fresh bytes.
func fresh(_ buffer: ByteBuffer) -> ByteBuffer {
    var copy = allocator.buffer(capacity: buffer.readableBytes)
    copy.writeImmutableBuffer(buffer)
    return copy
}

/// Feeds `frames` to an accumulator in reads of `chunk` bytes, as the event loop hands them over.
func decodeAll<Frame: WireFrameDecodable>(_ frames: ByteBuffer, as: Frame.Type, chunk: Int) throws -> Int {
    var accumulator = FrameAccumulator<Frame>(maxFrameLength: 131_072)
    var input = frames
    var count = 0
    while input.readableBytes > 0 {
        let slice = input.readSlice(length: min(chunk, input.readableBytes))!
        accumulator.append(slice)
        while let frame = try accumulator.next() {
            consume(frame)
            count += 1
        }
    }
    return count
}

do {
    let posts = postFrames(name: name, count: iterations)
    try measure("daemon: decode POST (9-byte name, 64 B payload), 16 KiB reads", operations: iterations) {
        let copy = fresh(posts)
        let decoded = try decodeAll(copy, as: ClientFrame.self, chunk: 16_384)
        precondition(decoded == iterations)
    }
    let longPosts = postFrames(name: longName, count: iterations)
    try measure("daemon: decode POST (43-byte name, 64 B payload), 16 KiB reads", operations: iterations) {
        let copy = fresh(longPosts)
        let decoded = try decodeAll(copy, as: ClientFrame.self, chunk: 16_384)
        precondition(decoded == iterations)
    }
    measure("daemon: validate a 43-byte name", operations: iterations) {
        for _ in 0..<iterations {
            consume(try? NotificationName.validate(longName))
        }
    }
    measure("daemon: encode NOTIFICATION into a fresh buffer (once per post)", operations: iterations) {
        for index in 0..<iterations {
            var frame = allocator.buffer(
                capacity: NotificationFrame.encodedLength(nameByteCount: name.utf8.count, payloadByteCount: 64))
            NotificationFrame.encode(sequence: UInt64(index), sender: sender, name: name, payload: payload, into: &frame)
            consume(frame)
        }
    }
    measure("daemon: append a shared NOTIFICATION to 16 outbound buffers, 64 posts per flush (per delivery)", operations: iterations * 16) {
        var outbound = (0..<16).map { _ in allocator.buffer(capacity: 256) }
        var frame = allocator.buffer(capacity: 128)
        NotificationFrame.encode(sequence: 1, sender: sender, name: name, payload: payload, into: &frame)
        for index in 0..<iterations {
            for connection in 0..<16 { outbound[connection].writeImmutableBuffer(frame) }
            if index % 64 == 63 {
                for connection in 0..<16 {
                    let written = outbound[connection]
                    outbound[connection] = allocator.buffer(capacity: min(max(written.readableBytes, 256), 65_536))
                    consume(written)
                }
            }
        }
    }
    let notifications = notificationFrames(name: name, count: iterations)
    try measure("client: decode NOTIFICATION (9-byte name, 64 B payload), 16 KiB reads", operations: iterations) {
        let copy = fresh(notifications)
        let decoded = try decodeAll(copy, as: ServerFrame.self, chunk: 16_384)
        precondition(decoded == iterations)
    }
    let longNotifications = notificationFrames(name: longName, count: iterations)
    try measure("client: decode NOTIFICATION (43-byte name, 64 B payload), 16 KiB reads", operations: iterations) {
        let copy = fresh(longNotifications)
        let decoded = try decodeAll(copy, as: ServerFrame.self, chunk: 16_384)
        precondition(decoded == iterations)
    }
    measure("client: encode POST into a shared outgoing buffer", operations: iterations) {
        var outgoing = allocator.buffer(capacity: 256)
        for index in 0..<iterations {
            ClientFrame.post(.init(requestID: UInt32(index + 1), name: name, payload: payload)).encode(into: &outgoing)
            if index % 64 == 63 { outgoing = allocator.buffer(capacity: 256) }
        }
    }
} catch {
    print("notify-alloc-bench: \(error)")
    exit(1)
}
