import Foundation
import NIOCore
import NIOEmbedded
import NIOPosix
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Open connections' pids, shared with the pool's threads.
private final class OpenSet: @unchecked Sendable {  // guarded by `lock`
    private let lock = NSLock()
    private var pids: Set<UInt32>

    init(_ pids: ClosedRange<UInt32>) { self.pids = Set(pids) }
    func remove(_ pid: UInt32) { lock.withLock { _ = pids.remove(pid) } }
    func contains(_ pid: UInt32) -> Bool { lock.withLock { pids.contains(pid) } }
}

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
        // 101 connections come and go (a client reconnecting in a loop), 2 stay.
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
        let open = OpenSet(UInt32(1)...UInt32(2_500))
        // Reading pid 10's name, the pool thread sees pid 20 close (its connection ends during the batch).
        let reader = CommandNameReader(eventLoop: EmbeddedEventLoop(), pool: nil) { pid in
            if pid == 10 { open.remove(20) }
            return log.read(pid)
        }
        var told: [UInt32] = []
        for pid in UInt32(1)...2_500 {
            reader.enqueue(pid: pid, found: { _ in told.append(pid) }, isWaiting: { open.contains(pid) })
        }
        reader.readPending()
        #expect(log.readPIDs.count == CommandNameReader.batchLimit)
        #expect(!told.contains(20), "closed while its batch was read: not told")
        #expect(told.count == CommandNameReader.batchLimit - 1)
        open.remove(2_000)
        reader.readPending()
        reader.readPending()
        #expect(log.readPIDs.count == 2_499)
        #expect(told.count == 2_498)
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

    @Test("A connection that closes before its name is read is freed at once: its waiting request does not keep it")
    func closedConnectionIsNotKeptByItsRequest() throws {
        let embedded = EmbeddedBroker()
        weak var handler: PeerChannelHandler?
        do {
            let peer = try embedded.connect("gone")
            _ = try peer.hello()
            handler = peer.handler
            try peer.channel.close().wait()
            embedded.run()
        }
        #expect(embedded.broker.identities.commands.pendingCount == 1, "its request still waits for the tick")
        #expect(handler == nil, "the closed connection (its handler, peer and queues) is kept until the tick")
        embedded.broker.identities.commands.readPending()
        #expect(embedded.broker.identities.commands.pendingCount == 0)
    }

    @Test("On the pool, one batch is in flight at a time and its names land on the event loop")
    func onePoolBatchInFlight() async throws {
        let log = ReadLog()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let (batchesWhileInFlight, landed) = try await loop.submit {
            let reader = CommandNameReader(eventLoop: loop, pool: pool, command: log.read)
            let promise = loop.makePromise(of: (names: [String?], batches: Int).self)
            var names: [String?] = []
            for pid in UInt32(1)...4 {
                reader.enqueue(
                    pid: pid,
                    found: {
                        loop.preconditionInEventLoop()
                        names.append($0)
                        // The first batch landed: the next tick reads the name that waited for it.
                        if names.count == 3 { reader.readPending() }
                        if names.count == 4 { promise.succeed((names, reader.batches)) }
                    }, isWaiting: { true })
                if pid == 3 { reader.readPending() }
            }
            // The first batch is in flight: this tick starts nothing.
            reader.readPending()
            return (reader.batches, promise.futureResult)
        }.get()
        let (names, batches) = try await landed.get()
        #expect(batchesWhileInFlight == 1)
        #expect(batches == 2)
        #expect(names == ["cmd-1", "cmd-2", "cmd-3", "cmd-4"])
        #expect(log.readPIDs == [1, 2, 3, 4])
        try await pool.shutdownGracefully()
        try await group.shutdownGracefully()
    }
}
