/// The payloads of notifications as they are read, copied back to back into one allocation.
///
/// An array per payload would be a heap allocation per notification on the I/O thread, freed on the handler's
/// thread. A block holds ``standardCapacity`` bytes of payloads (or one larger
/// payload) and each ``ReceivedNotification`` keeps a reference to it with its range; the array is only made if
/// a handler asks for ``ReceivedNotification/payload``. The block is freed with the last notification
/// referring to it, so keeping a notification keeps at most one block's bytes alive.
///
/// Only the connection's I/O thread appends (owning the current block through ``DeliveryStaging``). A range is
/// written before the notification holding it is handed to another thread and never written again, so other
/// threads only ever read bytes that no thread writes any more.
final class PayloadBlock: @unchecked Sendable {
    /// Bytes a block holds unless one payload needs more.
    static let standardCapacity = 16 * 1024

    private let bytes: UnsafeMutableRawPointer
    private let capacity: Int
    // Written by the I/O thread only (see above).
    private var used = 0

    private init(capacity: Int) {
        self.capacity = capacity
        bytes = .allocate(byteCount: capacity, alignment: 1)
    }

    deinit {
        bytes.deallocate()
    }

    /// A block with room for `capacity` bytes.
    static func make(capacity: Int) -> PayloadBlock {
        PayloadBlock(capacity: capacity)
    }

    /// Copies `source` into the block and returns its offset, or `nil` if it does not fit (I/O thread only).
    func append(_ source: UnsafeRawBufferPointer) -> Int? {
        let offset = used
        guard capacity - offset >= source.count else { return nil }
        if let base = source.baseAddress {
            (bytes + offset).copyMemory(from: base, byteCount: source.count)
        }
        used = offset + source.count
        return offset
    }

    /// Calls `body` with the bytes at `offset ..< offset + count`, which ``append(_:)`` returned.
    func withBytes<Result>(
        offset: Int, count: Int, _ body: (UnsafeRawBufferPointer) throws -> Result
    ) rethrows -> Result {
        try body(UnsafeRawBufferPointer(start: bytes + offset, count: count))
    }
}
