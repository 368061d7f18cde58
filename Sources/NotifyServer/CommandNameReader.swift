import NIOCore
import NIOPosix

/// Reads connections' command names (for introspection) in batches, on a thread pool, at the server's 50 ms tick.
///
/// A name is only shown by a `clients` query, so it is not worth a thread hop per connection: a connection asks
/// (``enqueue(pid:found:isWaiting:)``), and the next ``readPending()`` reads the names of those still open, in one
/// pool job. A client that connects and leaves between two ticks costs no `/proc` read and no hop at all. One
/// batch is in flight at a time, of at most ``batchLimit`` names: a read that hangs holds one pool thread, and
/// later connections wait for it. Lives on the server's event loop.
final class CommandNameReader {
    private struct Request {
        var pid: UInt32
        var found: (String?) -> Void
        var isWaiting: () -> Bool
    }

    /// The most names one pool job reads (and the event loop hands out when it answers).
    static let batchLimit = 1_024

    private let eventLoop: EventLoop
    private let pool: NIOThreadPool?
    private let command: @Sendable (UInt32) -> String?
    private var pending: [Request] = []
    private var pruneAt = 4_096
    private var inFlight = false
    /// Pool jobs started so far.
    private(set) var batches = 0

    /// - Parameter pool: where names are read; `nil` reads them on the calling thread (only for tests that never
    ///   connect a client).
    init(eventLoop: EventLoop, pool: NIOThreadPool?, command: @escaping @Sendable (UInt32) -> String?) {
        self.eventLoop = eventLoop
        self.pool = pool
        self.command = command
    }

    /// Connections waiting for their name (closed ones included until the next tick drops them).
    var pendingCount: Int { pending.count }

    /// Asks for `pid`'s command name; `found` runs on the event loop after a later ``readPending()``, unless
    /// `isWaiting` says by then that the connection is gone.
    func enqueue(pid: UInt32, found: @escaping (String?) -> Void, isWaiting: @escaping () -> Bool) {
        pending.append(Request(pid: pid, found: found, isWaiting: isWaiting))
        // A connection flood between two ticks: what is closed already need not wait for the tick to be dropped.
        guard pending.count >= pruneAt else { return }
        pending.removeAll { !$0.isWaiting() }
        pruneAt = max(4_096, 2 * pending.count)
    }

    /// Reads the names of the connections that asked and are still open (the tick calls this).
    func readPending() {
        guard !inFlight, !pending.isEmpty else { return }
        pending.removeAll { !$0.isWaiting() }
        guard !pending.isEmpty else { return }
        let batch = Array(pending.prefix(Self.batchLimit))
        pending.removeFirst(batch.count)
        let pids = batch.map(\.pid)
        let command = self.command
        batches += 1
        guard let pool else {
            land(pids.map(command), for: batch)
            return
        }
        inFlight = true
        pool.runIfActive(eventLoop: eventLoop) { pids.map(command) }.assumeIsolated().whenComplete { [self] result in
            inFlight = false
            // A pool that stopped (the server is shutting down) reads nothing: the names stay unknown.
            land((try? result.get()) ?? Array(repeating: nil, count: batch.count), for: batch)
        }
    }

    private func land(_ names: [String?], for batch: [Request]) {
        for (request, name) in zip(batch, names) where request.isWaiting() { request.found(name) }
    }
}
