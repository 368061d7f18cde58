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
///
/// The bytes follow the object's header in the same allocation (a `ManagedBuffer`). With the bytes apart, blocks
/// were small objects allocated side by side: the handler's thread releasing the last burst's block and the I/O
/// thread retaining the next one's wrote the same cache line, a stall on each notification's reference.
final class PayloadBlock: ManagedBuffer<PayloadBlock.Header, UInt8> {
    /// Bytes a block holds unless one payload needs more.
    static let standardCapacity = 16 * 1024

    /// The block's bookkeeping, written by the I/O thread only (see above).
    struct Header {
        let capacity: Int
        var used = 0
    }

    /// A block with room for `capacity` bytes.
    static func make(capacity: Int) -> PayloadBlock {
        unsafeDowncast(create(minimumCapacity: capacity) { _ in Header(capacity: capacity) }, to: PayloadBlock.self)
    }

    /// Copies `source` after the bytes already stored; returns its offset, or `nil` if it does not fit.
    func append(_ source: UnsafeRawBufferPointer) -> Int? {
        withUnsafeMutablePointers { header, bytes in
            let offset = header.pointee.used
            guard header.pointee.capacity - offset >= source.count else { return nil }
            if let base = source.baseAddress {
                UnsafeMutableRawPointer(bytes + offset).copyMemory(from: base, byteCount: source.count)
            }
            header.pointee.used = offset + source.count
            return offset
        }
    }

    /// Calls `body` with the `count` bytes at `offset` (a range ``append(_:)`` returned).
    func withBytes<Result>(
        offset: Int, count: Int, _ body: (UnsafeRawBufferPointer) throws -> Result
    ) rethrows -> Result {
        try withUnsafeMutablePointerToElements { bytes in
            try body(UnsafeRawBufferPointer(start: bytes + offset, count: count))
        }
    }
}
