import NIOCore
import NotifyWire

/// What one peer is sent: the bytes waiting for its socket, the notifications held back under its
/// subscriptions' policies while it cannot take them, and the charge of both to its user's account.
///
/// The broker offers it notifications and acts on the answer (flush, count, disconnect); the queue does no I/O.
struct DeliveryQueue {
    /// What became of an offered notification.
    enum Offer {
        /// Queued for the socket; `flushNow` when enough is queued to hand it over before the read burst ends.
        case queued(flushNow: Bool)
        /// Held under its policy (see ``Held``).
        case held(Held)
        /// Not taken: the subscription with this id has the `disconnect` policy and the peer is too slow.
        case slowConsumer(subscriptionID: UInt32)
    }

    /// What holding notifications cost, for the peer's and the daemon's counters.
    struct Held {
        /// Earlier notifications the held ones merged with (`coalesce`).
        var merged: UInt64 = 0
        /// Notifications dropped (a queue's limit) or evicted (the byte bounds) to make room.
        var dropped: UInt64 = 0
        /// Nothing was held before: the broker starts offering this queue releases.
        var startedHolding = false
    }

    private(set) var outbound: OutboundQueue
    private var held: HeldNotifications?
    /// Notifications a predecessor daemon held while the peer was suspended, as frames: released before anything
    /// held here, once the peer resumes.
    private var carriedOver: ByteBuffer?
    /// Frames in ``carriedOver``.
    private var carriedOverCount = 0
    /// When this peer last started holding notifications (its oldest held one waited at most this long).
    private(set) var holdingSince: NIODeadline?
    private var charge: OutboundCharge
    /// The most bytes pending or held for this peer.
    let limit: Int
    /// Unflushed bytes past which the peer is flushed before the read burst ends.
    private let eagerFlushBytes: Int
    /// Nesting depth of `SUSPEND`: nothing is queued for the socket while above 0.
    private(set) var suspendCount = 0
    private(set) var merged: UInt64 = 0
    private(set) var dropped: UInt64 = 0
    /// The peer is gone: writes still completing must not charge its user again.
    private var isClosed = false

    init(limit: Int, account: UserAccount) {
        self.limit = limit
        self.eagerFlushBytes = min(256 * 1024, max(limit / 4, 4 * 1024))
        // A batch ends past the eager threshold by at most a run or a frame.
        self.outbound = OutboundQueue(allocator: ByteBufferAllocator(), batchCapacityLimit: eagerFlushBytes + 32 * 1024)
        self.charge = OutboundCharge(account: account)
    }

    var pendingBytes: Int { outbound.pendingBytes }
    var heldBytes: Int { (held?.bytes ?? 0) + (carriedOver?.readableBytes ?? 0) }
    var isHolding: Bool { held != nil }
    var isSuspended: Bool { suspendCount > 0 }

    /// Bytes the user's quota still allows this queue to add.
    private var quotaRoom: Int { charge.account.outboundRoom }

    // MARK: Notifications

    /// Queues encoded notifications (one, or a whole run) in one append, if the peer can take them all now: it
    /// holds nothing, is not suspended, and they fit its bound and its user's quota.
    ///
    /// - Returns: whether to flush now, or `nil` if nothing was done (the caller then holds them or offers
    ///   them one by one).
    /// - Parameter sharingStorage: queue `encoded` as it is, to be written from its own storage (a run that every
    ///   recipient shares), rather than copied into the peer's batch.
    mutating func queueIfRoom(_ encoded: ByteBuffer, sharingStorage: Bool = false) -> Bool? {
        let size = encoded.readableBytes
        guard held == nil, suspendCount == 0, outbound.pendingBytes + size <= limit, size <= quotaRoom else {
            return nil
        }
        if sharingStorage { outbound.appendShared(encoded) } else { outbound.append(encoded) }
        syncCharge()
        return shouldFlushEarly
    }

    /// Queues one notification that `encode` writes straight into the outbound bytes (`size` of them), if the peer
    /// can take it now, as ``queueIfRoom(_:)`` decides.
    ///
    /// - Returns: whether to flush now, or `nil` if nothing was done.
    @inline(__always)
    mutating func encodeIfRoom(size: Int, _ encode: (inout ByteBuffer) -> Void) -> Bool? {
        guard held == nil, suspendCount == 0, outbound.pendingBytes + size <= limit, size <= quotaRoom else {
            return nil
        }
        outbound.append(encodedSize: size, encode)
        syncCharge()
        return shouldFlushEarly
    }

    /// Whether enough is queued to hand it to the socket before the read burst ends. One burst can carry more
    /// posts than the bound holds: batches go as the burst goes, so a subscriber that keeps reading is not
    /// treated as slow. Up to 256 KiB a batch: with large notifications, smaller batches cost a write (and a
    /// trip through the channel) every few frames.
    private var shouldFlushEarly: Bool {
        outbound.unflushedBytes >= eagerFlushBytes
    }

    /// Queues one notification, or holds it under `policy` when the peer cannot take it now.
    ///
    /// - Parameter alsoMerged: earlier notifications of a run, not offered, that this one supersedes (`coalesce`).
    mutating func offer(
        _ frame: ByteBuffer, name: String, sequence: UInt64, policy: DeliveryPolicy, subscriptionID: UInt32,
        alsoMerged: UInt64 = 0
    ) -> Offer {
        if let flushNow = queueIfRoom(frame) { return .queued(flushNow: flushNow) }
        // `disconnect` is for a peer that cannot keep up, not for one that is only working through a backlog it
        // was allowed to build (after a resume, say): then the notification is held like the rest.
        let isSlow = outbound.pendingBytes + frame.readableBytes > limit || frame.readableBytes > quotaRoom
        if suspendCount == 0, policy == .disconnect, isSlow { return .slowConsumer(subscriptionID: subscriptionID) }
        var result = Held(startedHolding: startHolding())
        // A `disconnect` subscription that is not being disconnected is held like a bounded queue.
        let effective = policy == .disconnect ? DeliveryPolicy.queue(limit: 1_000) : policy
        let outcome = held!.hold(
            frame, name: name, sequence: sequence, policy: effective, subscriptionID: subscriptionID,
            alsoMerged: effective == .coalesce ? alsoMerged : 0)
        result.merged = outcome.merged
        result.dropped = outcome.dropped + enforceHeldBound()
        count(result)
        return .held(result)
    }

    /// Takes the frames of a run at once where its policy allows: a `queue` subscription queues what fits and
    /// holds the rest as one chunk (one copy, not one entry per post); a `coalesce` subscription that is holding
    /// already keeps only the run's last post.
    ///
    /// - Returns: `nil` when the run must be offered frame by frame (``offer(_:name:sequence:policy:subscriptionID:alsoMerged:)``).
    mutating func offerRun(_ run: PostRun, policy: DeliveryPolicy, subscriptionID: UInt32) -> (flushNow: Bool, held: Held)? {
        if held != nil, policy == .coalesce, let last = run.frames.last {
            let offer = offer(
                run.slice(last), name: run.name, sequence: last.sequence, policy: policy, subscriptionID: subscriptionID,
                alsoMerged: UInt64(run.frames.count - 1))
            guard case .held(let result) = offer else { return (false, Held()) }
            return (false, result)
        }
        guard case .queue(let queueLimit) = policy, run.frames.count > 1 else { return nil }
        // What fits now goes out now; the rest is held as one chunk.
        var first = 0
        var flushNow = false
        if held == nil, suspendCount == 0 {
            var room = min(limit - outbound.pendingBytes, quotaRoom)
            while first < run.frames.count, run.frames[first].length <= room {
                room -= run.frames[first].length
                first += 1
            }
            if first > 0 { flushNow = queueIfRoom(run.slice(through: first - 1)) ?? false }
        }
        guard first < run.frames.count else { return (flushNow, Held()) }
        var result = Held(startedHolding: startHolding())
        result.dropped = held!.holdRun(
            run.slice(from: first), count: run.frames.count - first, firstSequence: run.frames[first].sequence,
            limit: queueLimit, subscriptionID: subscriptionID)
        result.dropped += enforceHeldBound()
        count(result)
        return (flushNow, result)
    }

    private mutating func count(_ result: Held) {
        merged += result.merged
        dropped += result.dropped
    }

    /// - Returns: whether holding starts now.
    private mutating func startHolding() -> Bool {
        guard held == nil else { return false }
        held = HeldNotifications()
        if holdingSince == nil { holdingSince = .now() }
        return true
    }

    /// Held bytes are bounded per peer and count towards the user's quota: evicts the oldest beyond.
    ///
    /// - Returns: how many notifications were evicted.
    private mutating func enforceHeldBound() -> UInt64 {
        var lost: UInt64 = 0
        while true {
            var excess = held!.bytes - limit
            if !charge.account.isExempt {
                let uncharged = held!.bytes + outbound.pendingBytes - charge.bytes
                excess = max(excess, uncharged - charge.account.outboundRoom)
            }
            guard excess > 0 else { break }
            let evicted = held!.evictOldest(bytes: excess)
            if evicted == 0 { break }
            lost += evicted
        }
        syncCharge()
        return lost
    }

    /// What a release did.
    enum Release {
        /// Nothing: nothing is held, or the peer has no room yet.
        case none
        /// Held notifications were queued; `caughtUp` when none is held any more.
        case released(caughtUp: Bool)
    }

    /// Moves held notifications into the outbound bytes once the peer has room and is not suspended.
    mutating func releaseHeld() -> Release {
        if suspendCount == 0, let carried = carriedOver.take() {
            outbound.append(carried)
            syncCharge()
            if held == nil { return .released(caughtUp: true) }
        }
        guard held != nil, suspendCount == 0, outbound.pendingBytes <= limit / 2, quotaRoom >= 0 else { return .none }
        held!.release(into: &outbound.buffer, budget: limit - outbound.pendingBytes)
        let caughtUp = held!.isEmpty
        if caughtUp { held = nil }
        syncCharge()
        return .released(caughtUp: caughtUp)
    }

    /// Queues everything held whatever the bound (a graceful shutdown sends it all before `GOODBYE`).
    ///
    /// - Returns: whether anything was held.
    mutating func releaseAllHeld() -> Bool {
        if let carried = carriedOver.take() {
            outbound.append(carried)
            syncCharge()
        }
        guard held != nil else { return false }
        held!.release(into: &outbound.buffer, budget: .max)
        held = nil
        syncCharge()
        return true
    }

    /// Forgets what is unflushed and held (a slow consumer is being disconnected).
    mutating func discard() {
        _ = outbound.discardUnflushed()
        held = nil
        carriedOver = nil
        syncCharge()
    }

    // MARK: Replies and suspension

    /// Queues a reply or notice.
    ///
    /// - Returns: whether more is pending than the bound (the peer sends requests faster than it reads the
    ///   replies: the caller stops reading its requests).
    mutating func append(_ frame: ServerFrame) -> Bool {
        outbound.append(frame)
        syncCharge()
        return outbound.pendingBytes > limit
    }

    /// Queues an encoded frame that is never held, merged or dropped (`STATE_CHANGED`), whatever is held and even
    /// while suspended: it may overtake held notifications, which are released later.
    ///
    /// - Returns: whether to flush now, or `nil` (nothing done) when it would take the pending bytes past the
    ///   bound or the user's outbound quota: the peer is then too slow for it.
    mutating func queueUnheld(_ frame: ByteBuffer) -> Bool? {
        let size = frame.readableBytes
        guard outbound.pendingBytes + size <= limit, size <= quotaRoom else { return nil }
        outbound.append(frame)
        syncCharge()
        return shouldFlushEarly
    }

    /// Queues a reply without checking the bound (retained notifications before the `OK` that closes them).
    mutating func appendWithoutCheck(_ frame: ServerFrame) {
        outbound.append(frame)
    }

    mutating func suspend() { suspendCount += 1 }

    /// - Returns: `false` when not suspended.
    mutating func resume() -> Bool {
        guard suspendCount > 0 else { return false }
        suspendCount -= 1
        return true
    }

    // MARK: Writing

    var hasUnflushedBytes: Bool { outbound.hasUnflushedBytes }

    /// Hands the unflushed bytes to `write` (they stay counted until ``completeWrite(_:)``); see
    /// ``OutboundQueue/handOver(_:)``.
    mutating func handOver(_ write: (ByteBuffer) -> Void) -> OutboundQueue.HandOver { outbound.handOver(write) }

    /// See ``OutboundQueue/settleHandOver(_:)``.
    mutating func settleHandOver(_ handOver: inout OutboundQueue.HandOver) -> Bool {
        outbound.settleHandOver(&handOver)
    }

    /// Records that `count` bytes handed out were written or discarded.
    mutating func completeWrite(_ count: Int) {
        outbound.completeWrite(count)
        syncCharge()
    }

    // MARK: Lag

    /// How far behind the peer is: notifications held and not yet queued, bytes owed (queued and held), and how
    /// long the oldest of them has waited (`protocol/PROTOCOL.md` § 11.3, `lag_…`).
    func lag(now: NIODeadline) -> (notifications: Int, bytes: Int, oldestSeconds: Double) {
        let notifications = (held?.count ?? 0) + (carriedOver == nil ? 0 : carriedOverCount)
        let since = [holdingSince, outbound.oldestUnfinishedSince].compactMap { $0 }.min()
        let seconds = since.map { Double((now - $0).nanoseconds) / 1e9 } ?? 0
        return (notifications, pendingBytes + heldBytes, max(seconds, 0))
    }

    // MARK: Hand-over

    /// Everything owed to the peer, for a hand-over: what is held is queued first (in order, as a graceful
    /// shutdown sends it), then the bytes not yet written (see ``OutboundQueue/owedBytes(unwrittenInChannel:)``).
    ///
    /// A suspended peer's held notifications stay apart (`held`), to be released when it resumes; a peer that
    /// only reads slowly has them queued after the rest, in order, as a graceful shutdown sends them.
    mutating func owedBytesForHandover(unwrittenInChannel: Int) -> (owed: [UInt8], held: [UInt8]) {
        var heldFrames: [UInt8] = []
        if suspendCount > 0 {
            var buffer = ByteBufferAllocator().buffer(capacity: heldBytes)
            if let carried = carriedOver { buffer.writeImmutableBuffer(carried) }
            held?.release(into: &buffer, budget: .max)
            heldFrames = Array(buffer.readableBytesView)
        } else {
            _ = releaseAllHeld()
        }
        return (outbound.owedBytes(unwrittenInChannel: unwrittenInChannel), heldFrames)
    }

    /// Takes over a predecessor's queue: its suspension, its counters, the bytes it still owed the peer and what
    /// it held while the peer was suspended.
    mutating func restore(suspendCount: Int, merged: UInt64, dropped: UInt64, owed: [UInt8], held heldFrames: [UInt8]) {
        self.suspendCount = suspendCount
        self.merged = merged
        self.dropped = dropped
        outbound.buffer.writeBytes(owed)
        if !heldFrames.isEmpty {
            carriedOver = ByteBuffer(bytes: heldFrames)
            carriedOverCount = WireFrame.count(in: heldFrames)
            holdingSince = .now()
        }
        syncCharge()
    }

    /// Gives the user's charge back (the peer is gone); nothing is charged from then on.
    mutating func close() {
        held = nil
        carriedOver = nil
        charge.release()
        isClosed = true
    }

    private mutating func syncCharge() {
        if held == nil, carriedOver == nil { holdingSince = nil }
        guard !isClosed else { return }
        charge.set(outbound.pendingBytes + heldBytes)
    }
}
