import NIOCore
import NotifyWire
import Testing

@testable import NotifyServer

/// The table of notifications held for a slow or suspended connection: release order across policies, the
/// loss notices, and a cost per notification that does not grow with the backlog.
@Suite("Held notifications")
struct HeldNotificationsTests {
    private static let sender = SenderCredentials(pid: 1, uid: 1_000, gid: 1_000)

    private static func frame(_ sequence: UInt64, _ name: String, payloadSize: Int = 16) -> ByteBuffer {
        var buffer = ByteBuffer()
        let payload = ByteBuffer(repeating: 0x61, count: payloadSize)
        ServerFrame.notification(NotificationFrame(sequence: sequence, sender: sender, name: name, payload: payload))
            .encode(into: &buffer)
        return buffer
    }

    /// What a release wrote, decoded: `n:<name>#<seq>`, `m:<name>#<seq>+<merged>`, `o:<subscription>=<count>`.
    private static func decoded(_ buffer: ByteBuffer) throws -> [String] {
        var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 20)
        accumulator.append(buffer)
        var result: [String] = []
        while let raw = try accumulator.nextRawFrame() {
            var body = raw.body
            switch try ServerFrame.decode(type: raw.type, body: &body) {
            case .notification(let n): result.append("n:\(n.name)#\(n.sequence)")
            case .notificationMerged(let merged, let n): result.append("m:\(n.name)#\(n.sequence)+\(merged)")
            case .overflow(let id, let count): result.append("o:\(id)=\(count)")
            case let other: Issue.record("unexpected frame \(other)")
            }
        }
        return result
    }

    private static func releaseAll(_ held: inout HeldNotifications) throws -> [String] {
        var buffer = ByteBuffer()
        held.release(into: &buffer, budget: .max)
        return try decoded(buffer)
    }

    @Test("release goes oldest first across policies; a coalesced name goes at its latest post, merged")
    func releaseOrder() throws {
        var held = HeldNotifications()
        _ = held.hold(Self.frame(1, "a"), name: "a", sequence: 1, policy: .coalesce, subscriptionID: 1)
        _ = held.hold(Self.frame(2, "q"), name: "q", sequence: 2, policy: .queue(limit: 10), subscriptionID: 2)
        _ = held.hold(Self.frame(3, "b"), name: "b", sequence: 3, policy: .coalesce, subscriptionID: 1)
        #expect(held.hold(Self.frame(4, "a"), name: "a", sequence: 4, policy: .coalesce, subscriptionID: 1).merged == 1)
        _ = held.hold(Self.frame(5, "q"), name: "q", sequence: 5, policy: .queue(limit: 10), subscriptionID: 2)
        #expect(held.count == 4)
        #expect(try Self.releaseAll(&held) == ["n:q#2", "n:b#3", "m:a#4+1", "n:q#5"])
        #expect(held.isEmpty)
        #expect(held.bytes == 0)
    }

    @Test("a full queue drops its oldest and reports it before its next notification")
    func queueOverflow() throws {
        var held = HeldNotifications()
        for sequence in UInt64(1)...5 {
            _ = held.hold(Self.frame(sequence, "q"), name: "q", sequence: sequence, policy: .queue(limit: 3), subscriptionID: 7)
        }
        #expect(try Self.releaseAll(&held) == ["o:7=2", "n:q#3", "n:q#4", "n:q#5"])
    }

    @Test("evictions are reported first; a queue emptied by eviction after drops still reports its drops")
    func evictionNotices() throws {
        var held = HeldNotifications()
        for sequence in UInt64(1)...3 {
            _ = held.hold(Self.frame(sequence, "q"), name: "q", sequence: sequence, policy: .queue(limit: 2), subscriptionID: 7)
        }
        _ = held.hold(Self.frame(4, "c"), name: "c", sequence: 4, policy: .coalesce, subscriptionID: 1)
        #expect(held.evictOldest() == 1)  // q#2
        #expect(held.evictOldest() == 1)  // q#3: the queue is empty, with one drop not yet reported
        #expect(try Self.releaseAll(&held) == ["o:0=2", "o:7=1", "n:c#4"])
        #expect(held.isEmpty)
    }

    @Test("a release stops once its budget is written and the next one goes on in order")
    func budgetedRelease() throws {
        var held = HeldNotifications()
        for sequence in UInt64(1)...10 {
            _ = held.hold(Self.frame(sequence, "q"), name: "q", sequence: sequence, policy: .queue(limit: 100), subscriptionID: 1)
        }
        let frameSize = Self.frame(1, "q").readableBytes
        var first = ByteBuffer()
        held.release(into: &first, budget: 3 * frameSize)
        #expect(try Self.decoded(first) == ["n:q#1", "n:q#2", "n:q#3"])
        #expect(try Self.releaseAll(&held) == (4...10).map { "n:q#\($0)" })
    }

    /// Holds `backlog` notifications of mixed policies (two queues, and names coalescing over and over), then
    /// releases them in budgets of a few frames, as a slow reader would take them: returns the order entries
    /// touched per notification held.
    private static func entriesTouchedPerNotification(backlog: Int) throws -> Double {
        var held = HeldNotifications()
        for index in 0..<backlog {
            let sequence = UInt64(index + 1)
            switch index % 4 {
            case 0: _ = held.hold(frame(sequence, "q1"), name: "q1", sequence: sequence, policy: .queue(limit: .max), subscriptionID: 1)
            case 1: _ = held.hold(frame(sequence, "q2"), name: "q2", sequence: sequence, policy: .queue(limit: 1_000), subscriptionID: 2)
            default:
                let name = "c\(index % 64)"
                _ = held.hold(frame(sequence, name), name: name, sequence: sequence, policy: .coalesce, subscriptionID: 3)
            }
            if index % 97 == 0 { _ = held.evictOldest() }
        }
        let budget = 8 * frame(1, "q1").readableBytes
        var releases = 0
        while !held.isEmpty {
            var buffer = ByteBuffer()
            held.release(into: &buffer, budget: budget)
            releases += 1
            try #require(releases <= backlog + 1, "release makes no progress")
        }
        return Double(held.entriesTouched) / Double(backlog)
    }

    @Test("holding and releasing touch a bounded number of entries per notification, whatever the backlog")
    func costDoesNotGrowWithBacklog() throws {
        let small = try Self.entriesTouchedPerNotification(backlog: 2_000)
        let large = try Self.entriesTouchedPerNotification(backlog: 200_000)
        // Each notification is added once and removed once (released, skipped or compacted away); compaction
        // adds at most a constant share. A table that sorted what it holds on each release touches thousands.
        #expect(small <= 6, "\(small) entries per notification at a backlog of 2,000")
        #expect(large <= 6, "\(large) entries per notification at a backlog of 200,000")
    }

    /// `count` frames of `name` with sequences from `first` on, back to back, as a run is held.
    private static func run(_ first: UInt64, count: Int, _ name: String) -> ByteBuffer {
        var buffer = ByteBuffer()
        for sequence in first..<(first + UInt64(count)) {
            var one = frame(sequence, name)
            buffer.writeBuffer(&one)
        }
        return buffer
    }

    /// Holds `runs` runs of `count` notifications of subscription 1 ("q", no limit), sequences from `first` on;
    /// returns the next sequence.
    @discardableResult
    private static func holdRuns(_ held: inout HeldNotifications, from first: UInt64, runs: Int, of count: Int) -> UInt64 {
        var sequence = first
        for _ in 0..<runs {
            _ = held.holdRun(Self.run(sequence, count: count, "q"), count: count, firstSequence: sequence, limit: .max, subscriptionID: 1)
            sequence += UInt64(count)
        }
        return sequence
    }

    @Test("a run is held as one entry and released in order, split where the budget ends, between others' notifications")
    func runsHeldAsOneChunk() throws {
        var held = HeldNotifications()
        _ = held.hold(Self.frame(1, "c"), name: "c", sequence: 1, policy: .coalesce, subscriptionID: 1)
        let touchedBefore = held.entriesTouched
        #expect(held.holdRun(Self.run(2, count: 500, "q"), count: 500, firstSequence: 2, limit: .max, subscriptionID: 2) == 0)
        #expect(held.entriesTouched == touchedBefore + 1, "a run of 500 touched \(held.entriesTouched - touchedBefore) entries")
        _ = held.hold(Self.frame(502, "d"), name: "d", sequence: 502, policy: .coalesce, subscriptionID: 1)
        #expect(held.count == 502)
        #expect(held.bytes == Self.frame(1, "c").readableBytes * 502)

        var first = ByteBuffer()
        held.release(into: &first, budget: 10 * Self.frame(1, "q").readableBytes + 1)
        // The coalesced c#1, then as many of the run as the rest of the budget takes (at least one past it).
        #expect(try Self.decoded(first) == ["n:c#1"] + (2...11).map { "n:q#\($0)" })
        #expect(try Self.releaseAll(&held) == (12...501).map { "n:q#\($0)" } + ["n:d#502"])
        #expect(held.isEmpty)
        #expect(held.bytes == 0)
    }

    @Test("a run longer than its queue's limit keeps the newest and reports the rest as dropped")
    func runBeyondQueueLimit() throws {
        var held = HeldNotifications()
        #expect(held.holdRun(Self.run(1, count: 8, "q"), count: 8, firstSequence: 1, limit: 3, subscriptionID: 4) == 5)
        #expect(held.holdRun(Self.run(9, count: 2, "q"), count: 2, firstSequence: 9, limit: 3, subscriptionID: 4) == 2)
        #expect(held.count == 3)
        #expect(try Self.releaseAll(&held) == ["o:4=7", "n:q#8", "n:q#9", "n:q#10"])
    }

    @Test("eviction by bytes drops whole notifications from the front of a run, oldest first, and reports them")
    func evictionInsideARun() throws {
        var held = HeldNotifications()
        let size = Self.frame(1, "q").readableBytes
        _ = held.holdRun(Self.run(1, count: 10, "q"), count: 10, firstSequence: 1, limit: .max, subscriptionID: 1)
        #expect(held.evictOldest(bytes: 2 * size + 1) == 3)
        #expect(held.bytes == 7 * size)
        #expect(try Self.releaseAll(&held) == ["o:0=3"] + (4...10).map { "n:q#\($0)" })
    }

    @Test("single notifications join their queue's last chunk, whose storage stays bounded however many pass through")
    func appendedChunksStayBounded() throws {
        var held = HeldNotifications()
        for sequence in UInt64(1)...100_000 {
            _ = held.hold(Self.frame(sequence, "q"), name: "q", sequence: sequence, policy: .queue(limit: 10), subscriptionID: 1)
        }
        #expect(held.count == 10)
        // Ten frames of ≈ 60 bytes, in chunks of at most 16 KiB (capacity rounded up to a power of two).
        #expect(held.storageBytes <= 2 * 32 * 1024, "\(held.storageBytes) bytes of storage for \(held.bytes) held")
        #expect(held.entriesTouched <= 100_000 + 2 * (100_000 / 100), "\(held.entriesTouched) entries touched")
        #expect(try Self.releaseAll(&held) == ["o:1=99990"] + (99_991...100_000).map { "n:q#\($0)" })
    }

    @Test("storage stays within a small factor of the bytes counted: alternating queues, and a run cut down by its limit")
    func storageFollowsTheCount() throws {
        var held = HeldNotifications()
        // Two subscriptions' posts alternate, so every notification starts a chunk of its own.
        for sequence in UInt64(1)...20_000 {
            let id: UInt32 = sequence % 2 == 0 ? 1 : 2
            _ = held.hold(Self.frame(sequence, "q\(id)"), name: "q\(id)", sequence: sequence, policy: .queue(limit: 100_000), subscriptionID: id)
        }
        #expect(held.storageBytes <= 2 * held.bytes, "\(held.storageBytes) bytes of storage for \(held.bytes) counted")

        var cut = HeldNotifications()
        _ = cut.holdRun(Self.run(1, count: 300, "r"), count: 300, firstSequence: 1, limit: 1, subscriptionID: 3)
        #expect(cut.count == 1)
        #expect(cut.storageBytes <= 4 * cut.bytes, "\(cut.storageBytes) bytes of storage kept for one notification of \(cut.bytes)")
        #expect(try Self.releaseAll(&cut) == ["o:3=299", "n:r#300"])
    }

    @Test("frames of mixed sizes: eviction by bytes and releases by budget cut a run exactly between notifications")
    func mixedSizesCutExactly() throws {
        var held = HeldNotifications()
        let sizes = [3, 200, 17, 0, 90, 1_000, 5]
        var run = ByteBuffer()
        var lengths: [Int] = []
        for (index, size) in sizes.enumerated() {
            var one = Self.frame(UInt64(index + 1), "q", payloadSize: size)
            lengths.append(one.readableBytes)
            run.writeBuffer(&one)
        }
        _ = held.holdRun(run, count: sizes.count, firstSequence: 1, limit: .max, subscriptionID: 1)
        // Exactly the first two frames' bytes: two go; one byte more: a third.
        #expect(held.evictOldest(bytes: lengths[0] + lengths[1]) == 2)
        #expect(held.evictOldest(bytes: 1) == 1)
        #expect(held.bytes == lengths[3...].reduce(0, +))
        var buffer = ByteBuffer()
        held.release(into: &buffer, budget: 1)
        #expect(try Self.decoded(buffer) == ["o:0=3"])
        // One byte more than the fourth frame: the fifth goes too, and no more.
        var second = ByteBuffer()
        held.release(into: &second, budget: lengths[3] + 1)
        #expect(try Self.decoded(second) == ["n:q#4", "n:q#5"])
        #expect(try Self.releaseAll(&held) == ["n:q#6", "n:q#7"])
        #expect(held.bytes == 0)
    }

    @Test("a backlog evicted by its byte bound copies no held byte again, and its storage follows the bytes counted")
    func boundedBacklogIsNotCopiedAgain() throws {
        var held = HeldNotifications()
        let bound = 256 * 1024
        var sequence: UInt64 = 1
        var lost: UInt64 = 0
        for round in 0..<2_000 {
            // Runs of 50–250 frames with payloads of 0–120 bytes, so chunk and eviction boundaries never line up.
            let count = 50 + (round * 37) % 200
            var run = ByteBuffer()
            for k in 0..<count {
                var one = Self.frame(sequence + UInt64(k), "q", payloadSize: (round + 7 * k) % 121)
                run.writeBuffer(&one)
            }
            lost += held.holdRun(run, count: count, firstSequence: sequence, limit: .max, subscriptionID: 1)
            sequence += UInt64(count)
            if held.bytes > bound { lost += held.evictOldest(bytes: held.bytes - bound) }
            #expect(held.bytes <= bound)
        }
        #expect(held.bytesRecopied == 0, "\(held.bytesRecopied) held bytes copied again by eviction")
        // What the chunks keep alive: the bytes counted, plus the taken front of the one chunk eviction cut.
        #expect(held.storageBytes <= 2 * (held.bytes + PostRun.byteLimit), "\(held.storageBytes) bytes of storage for \(held.bytes) counted")
        let released = try Self.releaseAll(&held)
        #expect(released.first == "o:0=\(lost)")
        let kept = UInt64(released.count - 1)
        let newest: [String] = (sequence - kept..<sequence).map { "n:q#\($0)" }
        #expect(Array(released.dropFirst()) == newest)
    }

    @Test("a backlog at its byte bound holds each run in the storage of a run it evicted, not in new memory")
    func boundedBacklogReusesStorage() throws {
        var held = HeldNotifications()
        let bound = 256 * 1024
        for round in UInt64(0)..<1_000 {
            _ = held.holdRun(Self.run(1 + round * 200, count: 200, "q"), count: 200, firstSequence: 1 + round * 200, limit: .max, subscriptionID: 1)
            if held.bytes > bound { _ = held.evictOldest(bytes: held.bytes - bound) }
        }
        // The first bound's worth of runs (≈ 20) needs storage of its own; after that a run evicted whole leaves
        // its storage to the next, except when the eviction cut a run in two.
        #expect(held.runStorageAllocations <= 100, "\(held.runStorageAllocations) runs of 1,000 held in new storage")
        // Into the spare's own memory: a second reference to it would have made the write copy it first.
        #expect(held.runsHeldInSpare == 1_000 - held.runStorageAllocations)
        #expect(held.storageBytes <= 2 * (held.bytes + PostRun.byteLimit), "\(held.storageBytes) bytes of storage for \(held.bytes) counted")
        #expect(try Self.releaseAll(&held).dropFirst().last == "n:q#200000")
    }

    @Test("storage dropped whole is kept for the next run only when it is about a run's size, and freed otherwise")
    func spareIsBounded() throws {
        var held = HeldNotifications()
        // A run whose last post is large (a run closes after the frame that crosses its byte limit).
        var large = Self.run(1, count: 10, "q")
        var big = Self.frame(11, "q", payloadSize: 200_000)
        large.writeBuffer(&big)
        _ = held.holdRun(large, count: 11, firstSequence: 1, limit: .max, subscriptionID: 1)
        _ = held.evictOldest(bytes: .max)
        #expect(held.count == 0)
        #expect(held.storageBytes == 0, "\(held.storageBytes) bytes kept after a 200 KB chunk was dropped")

        // Three runs of ≈ 18 KB; the first evicted whole leaves its storage as the spare, which a much smaller
        // run does not fit: it is freed, not kept for later.
        let sequence = Self.holdRuns(&held, from: 12, runs: 3, of: 300)
        _ = held.evictOldest(bytes: Self.run(12, count: 300, "q").readableBytes)
        let withSpare = held.storageBytes
        _ = held.holdRun(Self.run(sequence, count: 2, "q"), count: 2, firstSequence: sequence, limit: .max, subscriptionID: 1)
        #expect(held.storageBytes < withSpare, "\(held.storageBytes) bytes of storage after a small run, \(withSpare) before")
        #expect(held.storageBytes <= 2 * held.bytes, "\(held.storageBytes) bytes of storage for \(held.bytes) counted")
        #expect(held.count == 602)
    }

    @Test("eviction that leaves little held (a user's quota) leaves no uncounted memory beyond what is counted")
    func nearlyEmptiedBacklogIsCompacted() throws {
        var held = HeldNotifications()
        Self.holdRuns(&held, from: 1, runs: 20, of: 200)
        _ = held.evictOldest(bytes: held.bytes / 2)
        // All but about three notifications, cutting the last chunk: its taken front and the spare must not stay.
        _ = held.evictOldest(bytes: held.bytes - 3 * Self.frame(1, "q").readableBytes)
        #expect(held.count == 3)
        #expect(held.storageBytes <= 2 * held.bytes + 64, "\(held.storageBytes) bytes of storage for \(held.bytes) counted")
        #expect(try Self.releaseAll(&held).dropFirst() == ["n:q#3998", "n:q#3999", "n:q#4000"])
    }

    @Test("a spare kept while much was held is freed once a release leaves less held than it holds")
    func spareDoesNotOutliveTheBacklog() throws {
        var held = HeldNotifications()
        Self.holdRuns(&held, from: 1, runs: 3, of: 300)
        // The first run evicted whole: its storage becomes the spare (the other two runs cover it).
        _ = held.evictOldest(bytes: Self.run(1, count: 300, "q").readableBytes)
        let withSpare = held.storageBytes
        // A release leaves two notifications held.
        var buffer = ByteBuffer()
        held.release(into: &buffer, budget: held.bytes - 2 * Self.frame(1, "q").readableBytes)
        #expect(held.count == 2)
        #expect(held.storageBytes <= 2 * held.bytes + 64, "\(held.storageBytes) bytes of storage for \(held.bytes) counted (\(withSpare) before the release)")
    }

    /// A deterministic generator (SplitMix64), so that the model test replays the same operations every run.
    private struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test("random holds, runs, limits, evictions and budgeted releases of mixed sizes match a plain list of frames")
    func matchesAPlainModel() throws {
        var random = SplitMix(state: 13)
        var held = HeldNotifications()
        // The model: every held notification (subscription, sequence, frame length), oldest first.
        var model: [(id: UInt32, sequence: UInt64, length: Int)] = []
        // Losses: the model's, those the table returned, those its OVERFLOW notices reported.
        var lost: UInt64 = 0
        var counted: UInt64 = 0
        var reported: UInt64 = 0
        var sequence: UInt64 = 1
        let limits: [UInt32: UInt32] = [1: 40, 2: 1_000, 3: 7]
        func enforce(_ id: UInt32) {
            var excess = model.filter { $0.id == id }.count - Int(limits[id]!)
            while excess > 0, let index = model.firstIndex(where: { $0.id == id }) {
                model.remove(at: index)
                excess -= 1
                lost += 1
            }
        }
        for step in 0..<3_000 {
            let id = UInt32.random(in: 1...3, using: &random)
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4:
                let count = Int.random(in: 2...60, using: &random)
                var run = ByteBuffer()
                for k in 0..<count {
                    var one = Self.frame(sequence + UInt64(k), "q\(id)", payloadSize: Int.random(in: 0...300, using: &random))
                    model.append((id, sequence + UInt64(k), one.readableBytes))
                    run.writeBuffer(&one)
                }
                counted += held.holdRun(run, count: count, firstSequence: sequence, limit: limits[id]!, subscriptionID: id)
                sequence += UInt64(count)
                enforce(id)
            case 4..<7:
                let one = Self.frame(sequence, "q\(id)", payloadSize: Int.random(in: 0...300, using: &random))
                model.append((id, sequence, one.readableBytes))
                counted += held.hold(one, name: "q\(id)", sequence: sequence, policy: .queue(limit: limits[id]!), subscriptionID: id).dropped
                sequence += 1
                enforce(id)
            case 7, 8:
                let wanted = Int.random(in: 1...4_000, using: &random)
                counted += held.evictOldest(bytes: wanted)
                var freed = 0
                while freed < wanted, !model.isEmpty {
                    freed += model.removeFirst().length
                    lost += 1
                }
            default:
                var buffer = ByteBuffer()
                held.release(into: &buffer, budget: Int.random(in: 1...6_000, using: &random))
                for entry in try Self.decoded(buffer) {
                    if entry.hasPrefix("o:") {
                        reported += UInt64(entry.split(separator: "=")[1])!
                    } else {
                        let expected = model.removeFirst()
                        #expect(entry == "n:q\(expected.id)#\(expected.sequence)", "step \(step)")
                    }
                }
            }
            #expect(held.count == model.count, "step \(step)")
            #expect(counted == lost, "step \(step)")
            #expect(held.bytes == model.reduce(0) { $0 + $1.length }, "step \(step)")
            #expect(held.storageBytes <= 2 * held.bytes + 4 * PostRun.byteLimit, "step \(step): \(held.storageBytes) for \(held.bytes)")
        }
        var rest: [String] = []
        for entry in try Self.releaseAll(&held) {
            if entry.hasPrefix("o:") { reported += UInt64(entry.split(separator: "=")[1])! } else { rest.append(entry) }
        }
        #expect(rest == model.map { "n:q\($0.id)#\($0.sequence)" })
        #expect(reported == lost)
        #expect(lost > 1_000, "the operations lost only \(lost) notifications")
    }

    @Test("an OVERFLOW that uses up a release's budget is still followed by its subscription's next notification")
    func overflowIsNeverLastInARelease() throws {
        var held = HeldNotifications()
        for sequence in UInt64(1)...5 {
            _ = held.hold(Self.frame(sequence, "q"), name: "q", sequence: sequence, policy: .queue(limit: 2), subscriptionID: 7)
        }
        var buffer = ByteBuffer()
        held.release(into: &buffer, budget: 1)
        #expect(try Self.decoded(buffer) == ["o:7=3", "n:q#4"])
        #expect(try Self.releaseAll(&held) == ["n:q#5"])
    }
}
