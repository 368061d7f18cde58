import Foundation
import NIOCore
import NIOEmbedded
import NIOPosix
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// The pids whose command names were read, shared with the pool's threads.
private final class ReadLog: @unchecked Sendable {  // guarded by `lock`
    private let lock = NSLock()
    private var pids: [UInt32] = []

    func read(_ pid: UInt32) -> String? {
        lock.withLock {
            pids.append(pid)
            return "cmd-\(pid)"
        }
    }

    var readPIDs: [UInt32] { lock.withLock { pids } }
}

@Suite("Command names read in batches at the tick")
struct CommandNameReaderTests {
    @Test("A connection that closes before the tick costs no /proc read; those still open are read in one batch")
    func closedBeforeTheTickAreNotRead() throws {
        let log = ReadLog()
        let lookup = PeerIdentityLookup(groups: { _, gid in [gid] }, command: log.read)
        let resolver = PeerIdentityResolver(eventLoop: EmbeddedEventLoop(), pool: nil, lookup: lookup)
        var open: Set<UInt32> = []
        var found: [UInt32: String] = [:]
        // 100 connections come and go (a client reconnecting in a loop), 3 stay.
        for pid in UInt32(1)...103 {
            if pid % 40 == 0 { open.insert(pid) }
            resolver.resolve(
                SenderCredentials(pid: pid, uid: 1000, gid: 1000), groupsFound: { _ in },
                commandFound: { found[pid] = $0 }, isWaiting: { open.contains(pid) })
        }
        #expect(log.readPIDs.isEmpty, "nothing is read before the tick")
        resolver.commands.readPending()
        #expect(log.readPIDs == [40, 80], "only the connections still open are read")
        #expect(found == [40: "cmd-40", 80: "cmd-80"])
        #expect(resolver.commands.batches == 1)
        #expect(resolver.commands.pendingCount == 0)
        resolver.commands.readPending()
        #expect(log.readPIDs == [40, 80], "a name is read once")
    }

    @Test("A connection that closes while its batch is read is not told; the batches are bounded")
    func largeBacklogInBoundedBatches() throws {
        let log = ReadLog()
        let reader = CommandNameReader(eventLoop: EmbeddedEventLoop(), pool: nil, command: log.read)
        var open = Set(UInt32(1)...UInt32(2_500))
        var told = 0
        for pid in UInt32(1)...2_500 {
            reader.enqueue(pid: pid, found: { _ in told += 1 }, isWaiting: { open.contains(pid) })
        }
        reader.readPending()
        #expect(log.readPIDs.count == CommandNameReader.batchLimit)
        open.remove(2_000)
        reader.readPending()
        reader.readPending()
        #expect(log.readPIDs.count == 2_499)
        #expect(told == 2_499)
        #expect(reader.batches == 3)
    }

    @Test("A flood of connections that close at once is not kept until the tick")
    func closedFloodIsPruned() {
        let log = ReadLog()
        let reader = CommandNameReader(eventLoop: EmbeddedEventLoop(), pool: nil, command: log.read)
        reader.enqueue(pid: 1, found: { _ in }, isWaiting: { true })
        for pid in UInt32(2)...100_000 {
            reader.enqueue(pid: pid, found: { _ in }, isWaiting: { false })
        }
        #expect(reader.pendingCount <= 8_192, "\(reader.pendingCount) closed connections kept")
        reader.readPending()
        #expect(log.readPIDs == [1])
    }

    @Test("On the pool, one batch is in flight at a time and its names land on the event loop")
    func onePoolBatchInFlight() async throws {
        let log = ReadLog()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let names = try await loop.submit {
            let reader = CommandNameReader(eventLoop: loop, pool: pool, command: log.read)
            let promise = loop.makePromise(of: [String?].self)
            var names: [String?] = []
            for pid in UInt32(1)...3 {
                reader.enqueue(
                    pid: pid,
                    found: {
                        loop.preconditionInEventLoop()
                        names.append($0)
                        if names.count == 3 { promise.succeed(names) }
                    }, isWaiting: { true })
            }
            reader.readPending()
            // In flight: a second tick starts nothing.
            reader.enqueue(pid: 4, found: { _ in }, isWaiting: { true })
            reader.readPending()
            precondition(reader.batches == 1)
            return promise.futureResult
        }.flatMap { $0 }.get()
        #expect(names == ["cmd-1", "cmd-2", "cmd-3"])
        #expect(log.readPIDs == [1, 2, 3])
        try await pool.shutdownGracefully()
        try await group.shutdownGracefully()
    }
}
