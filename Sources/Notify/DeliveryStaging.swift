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
        var owner: ObjectIdentifier?
        var batch: [ReceivedNotification] = []
    }

    private var slots: [Slot] = []
    /// Slots holding a staged batch, in the order their observation's first notification of the burst arrived.
    private var staged: [Int] = []
    /// Scratch space for ``CenterCore`` to collect one notification's observers without allocating per
    /// notification; see ``takeTargetBuffer()``.
    private var targetBuffer: [(ObservationCore, UInt64)] = []
    /// The name of the last notification read and where it went (see ``NotificationRun``).
    var run = NotificationRun()
    /// Where this burst's payloads are copied (see ``PayloadBlock``); `nil` until the burst's first payload.
    private var payloadBlock: PayloadBlock?
    /// Payload bytes stored in this burst, and in the previous one (which sizes the next block).
    private var burstPayloadBytes = 0
    private var previousBurstPayloadBytes = 0

    /// Copies a notification's payload out of the read buffer into this burst's ``PayloadBlock``.
    ///
    /// Each burst gets a block of its own, sized after the previous burst (256 bytes to 16 KiB): the handlers
    /// release the last burst's notifications while this thread fills the next block, so the two threads never
    /// update one block's reference count at the same time, and a trickle of notifications does not allocate
    /// 16 KiB each. A payload larger than the block gets a block of its own.
    func storePayload(_ bytes: UnsafeRawBufferPointer) -> ReceivedNotification.Storage {
        if bytes.isEmpty { return .array([]) }
        burstPayloadBytes += bytes.count
        if let block = payloadBlock, let offset = block.append(bytes) {
            return .block(block, offset: offset, count: bytes.count)
        }
        let size = min(max(2 * previousBurstPayloadBytes, 256), PayloadBlock.standardCapacity)
        let block = PayloadBlock.make(capacity: max(bytes.count, size))
        let offset = block.append(bytes)!
        if bytes.count < size {
            payloadBlock = block
        }
        return .block(block, offset: offset, count: bytes.count)
    }

    /// Hands `notification` to `observation` now if its handler runs inline, otherwise stages it for ``flush()``.
    func add(_ notification: consuming ReceivedNotification, for observation: ObservationCore) {
        if observation.runsHandlerInline {
            // Batching saves nothing for `.immediate` (there is no hop), and running it now keeps its promise of
            // running as soon as the notification is read.
            observation.deliver(notification)
            return
        }
        let index = observation.stagingSlot
        if index >= slots.count {
            slots.append(contentsOf: repeatElement(Slot(), count: index + 1 - slots.count))
        }
        let owner = ObjectIdentifier(observation)
        if slots[index].owner != owner {
            if slots[index].owner == nil {
                staged.append(index)
            } else {
                // A removed observation's slot went to a new one during this burst: the old batch goes first.
                handOver(index)
            }
            slots[index].observation = observation
            slots[index].owner = owner
        }
        slots[index].batch.append(notification)
        if slots[index].batch.count >= Self.maxBatch {
            // A long burst goes out in slices, so the target (the main queue, a run loop, an operation queue) can
            // do other work between them; the slot stays staged, its next batch empty.
            handOver(index)
        }
    }

    /// Hands every staged batch to its observation's executor, oldest-staged observation first.
    func flush() {
        if burstPayloadBytes > 0 {
            previousBurstPayloadBytes = burstPayloadBytes
            burstPayloadBytes = 0
            payloadBlock = nil
        }
        guard !staged.isEmpty else { return }
        // No executor runs a staged job synchronously (inline observations are never staged), so nothing can
        // stage into `staged` while it is being walked.
        for index in staged {
            handOver(index)
            // Do not keep a cancelled observation alive until its slot is next used.
            slots[index].observation = nil
            slots[index].owner = nil
        }
        staged.removeAll(keepingCapacity: true)
    }

    /// Hands the batch in slot `index` to its observation's executor as one job.
    private func handOver(_ index: Int) {
        guard let observation = slots[index].observation, !slots[index].batch.isEmpty else { return }
        var batch: [ReceivedNotification] = []
        swap(&batch, &slots[index].batch)
        // The next burst is likely as long: one allocation up front instead of growing step by step.
        slots[index].batch.reserveCapacity(batch.count)
        observation.deliver(batch: batch)
    }

    /// Lends the scratch target array, empty; give it back with ``returnTargetBuffer(_:)``.
    ///
    /// Moving it out (rather than filling it in place) keeps it uniquely referenced, so appending never copies,
    /// and a nested use (a handler running inline) simply gets an empty array of its own.
    func takeTargetBuffer() -> [(ObservationCore, UInt64)] {
        var buffer: [(ObservationCore, UInt64)] = []
        swap(&buffer, &targetBuffer)
        return buffer
    }

    /// Takes back the scratch target array, dropping its references (observations may be gone by the next
    /// notification) but keeping its capacity.
    func returnTargetBuffer(_ buffer: consuming [(ObservationCore, UInt64)]) {
        buffer.removeAll(keepingCapacity: true)
        targetBuffer = buffer
    }
}
