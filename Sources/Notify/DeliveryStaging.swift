/// Collects the notifications of one read burst per observation, so that each observation's executor is handed
/// one job per burst instead of one per notification.
///
/// A job per notification costs a thread wake-up per notification whenever the handler keeps up (the target's
/// worker goes idle between jobs); one job per burst costs one wake-up per read.
///
/// Confined to the connection's I/O thread: its ``DaemonChannelHandler`` owns it and, neither being `Sendable`,
/// the compiler keeps both there. Whoever stages must call ``flush()`` before anything that a caller may
/// observe as "later" than the staged notifications: the end of the read burst, any non-notification frame,
/// and the end of the connection.
final class DeliveryStaging {
    /// The most notifications handed to one observation's executor as one job.
    static let maxBatch = 256

    /// One observation's notifications of this burst, at its ``ObservationCore/stagingSlot``.
    private struct Slot {
        /// The observation staged here this burst (`nil`: none).
        var observation: ObservationCore?
        /// Its identity, compared for every notification without retaining the observation.
        var owner: UnsafeMutableRawPointer?
        /// This burst's notifications for it so far.
        var batch = NotificationBatch.Builder()
        /// The size of its last batch: a burst is likely as long as the one before, so one allocation up front.
        var expectedCount = 16
    }

    /// Everything the staging changes but the run (``run``, below), behind a pointer: a class's stored
    /// properties are checked for exclusive access at run time on every use (several per notification), a
    /// pointer's memory is not. Confinement to one thread, and no access held across a handler call, is what
    /// keeps uses apart.
    private struct State {
        var slots: [Slot] = []
        /// Slots holding a staged batch, in the order their observation's first notification of the burst arrived.
        var staged: [Int] = []
        /// Scratch space for ``CenterCore`` to collect one notification's observers without allocating per
        /// notification; see ``takeTargetBuffer()``.
        var targetBuffer: [(ObservationCore, UInt64)] = []
        /// Where this burst's payloads are copied (see ``PayloadBlock``); `nil` until the burst's first payload.
        var payloadBlock: PayloadBlock?
        /// Payload bytes stored in this burst, and in the previous one (which sizes the next block).
        var burstPayloadBytes = 0
        var previousBurstPayloadBytes = 0
    }

    private let state: UnsafeMutablePointer<State>

    /// The name of the last notification read and where it went (see ``NotificationRun``), used in place
    /// through this pointer for every notification read (the run is not copyable, so nothing copies it).
    let run: UnsafeMutablePointer<NotificationRun>

    init() {
        state = .allocate(capacity: 1)
        state.initialize(to: State())
        run = .allocate(capacity: 1)
        run.initialize(to: NotificationRun())
    }

    deinit {
        // Every burst ends with a flush; a staging dropped without one still frees what it holds.
        for index in state.pointee.slots.indices {
            state.pointee.slots[index].batch.discard()
        }
        state.deinitialize(count: 1)
        state.deallocate()
        run.deinitialize(count: 1)
        run.deallocate()
    }

    /// Copies a notification's payload out of the read buffer into this burst's ``PayloadBlock``.
    ///
    /// Each burst gets a block of its own, sized after the previous burst (256 bytes to 16 KiB): the handlers
    /// release the last burst's notifications while this thread fills the next block, so the two threads never
    /// update one block's reference count at the same time, and a trickle of notifications does not allocate
    /// 16 KiB each. A payload larger than the block gets a block of its own.
    func storePayload(_ bytes: UnsafeRawBufferPointer) -> ReceivedNotification.Storage {
        if bytes.isEmpty { return .array([]) }
        state.pointee.burstPayloadBytes += bytes.count
        if let block = state.pointee.payloadBlock, let offset = block.append(bytes) {
            return .block(block, offset: offset, count: bytes.count)
        }
        let size = min(max(2 * state.pointee.previousBurstPayloadBytes, 256), PayloadBlock.standardCapacity)
        let block = PayloadBlock.make(capacity: max(bytes.count, size))
        let offset = block.append(bytes)!
        if bytes.count < size {
            state.pointee.payloadBlock = block
        }
        return .block(block, offset: offset, count: bytes.count)
    }

    /// Hands `notification` to `observation` now if its handler runs inline, otherwise stages it for ``flush()``.
    func add(_ notification: consuming ReceivedNotification, for observation: ObservationCore) {
        add(notification, for: Unmanaged.passUnretained(observation))
    }

    /// ``add(_:for:)`` with the observation lent unretained (by a ``NotificationRun``, which holds it): its reference
    /// count is changed once per burst, when it takes a slot, rather than per notification.
    func add(_ notification: consuming ReceivedNotification, for lent: Unmanaged<ObservationCore>) {
        let (runsInline, index) = lent._withUnsafeGuaranteedRef { ($0.runsHandlerInline, $0.stagingSlot) }
        if runsInline {
            // Batching saves nothing for `.immediate` (there is no hop), and running it now keeps its promise of
            // running as soon as the notification is read.
            lent.takeUnretainedValue().deliver(notification)
            return
        }
        if index >= state.pointee.slots.count {
            state.pointee.slots.append(contentsOf: repeatElement(Slot(), count: index + 1 - state.pointee.slots.count))
        }
        let owner = lent.toOpaque()
        if state.pointee.slots[index].owner != owner {
            if state.pointee.slots[index].owner == nil {
                state.pointee.staged.append(index)
            } else {
                // A removed observation's slot went to a new one during this burst: the old batch goes first.
                handOver(index)
            }
            state.pointee.slots[index].observation = lent.takeUnretainedValue()
            state.pointee.slots[index].owner = owner
        }
        state.pointee.slots[index].batch.append(notification, expected: state.pointee.slots[index].expectedCount)
        if state.pointee.slots[index].batch.count >= Self.maxBatch {
            // A long burst goes out in slices, so the target (the main queue, a run loop, an operation queue) can
            // do other work between them; the slot stays staged, its next batch empty.
            handOver(index)
        }
    }

    /// Hands every staged batch to its observation's executor, oldest-staged observation first.
    func flush() {
        if state.pointee.burstPayloadBytes > 0 {
            state.pointee.previousBurstPayloadBytes = state.pointee.burstPayloadBytes
            state.pointee.burstPayloadBytes = 0
            state.pointee.payloadBlock = nil
        }
        guard !state.pointee.staged.isEmpty else { return }
        // No executor runs a staged job synchronously (inline observations are never staged), so nothing can
        // stage into `staged` while it is being walked.
        for index in state.pointee.staged {
            handOver(index)
            // Do not keep a cancelled observation alive until its slot is next used.
            state.pointee.slots[index].observation = nil
            state.pointee.slots[index].owner = nil
        }
        state.pointee.staged.removeAll(keepingCapacity: true)
    }

    /// Hands the batch in slot `index` to its observation's executor as one job.
    private func handOver(_ index: Int) {
        guard let observation = state.pointee.slots[index].observation,
            let batch = state.pointee.slots[index].batch.take()
        else { return }
        state.pointee.slots[index].expectedCount = min(batch.count, Self.maxBatch)
        observation.deliver(batch: batch)
    }

    /// Lends the scratch target array, empty; give it back with ``returnTargetBuffer(_:)``.
    ///
    /// Moving it out (rather than filling it in place) keeps it uniquely referenced, so appending never copies,
    /// and a nested use (a handler running inline) simply gets an empty array of its own.
    func takeTargetBuffer() -> [(ObservationCore, UInt64)] {
        var buffer: [(ObservationCore, UInt64)] = []
        swap(&buffer, &state.pointee.targetBuffer)
        return buffer
    }

    /// Takes back the scratch target array, dropping its references (observations may be gone by the next
    /// notification) but keeping its capacity.
    func returnTargetBuffer(_ buffer: consuming [(ObservationCore, UInt64)]) {
        buffer.removeAll(keepingCapacity: true)
        state.pointee.targetBuffer = buffer
    }
}
