#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSystemd

/// Sends journal entries with `sd_journal_sendv(3)`: one `iovec` per field, so values keep every byte.
///
/// (`sd_journal_send` is variadic and unavailable from Swift.) libsystemd reports success when no journal is
/// listening, so tests check ``JournalEntry`` instead of the journal.
package enum JournalWriter {
    /// Sends one entry.
    ///
    /// - Returns: 0 on success, and also when no journal is listening (libsystemd drops the entry silently);
    ///   a negative errno when sending failed otherwise. Logging never throws.
    @discardableResult
    package static func send(_ fields: [JournalField]) -> Int32 {
        guard !fields.isEmpty else { return 0 }
        var storage: [UInt8] = []
        var ranges: [Range<Int>] = []
        ranges.reserveCapacity(fields.count)
        for field in fields {
            let start = storage.count
            storage.append(contentsOf: field.name.utf8)
            storage.append(UInt8(ascii: "="))
            storage.append(contentsOf: field.value)
            ranges.append(start..<storage.count)
        }
        return storage.withUnsafeMutableBytes { raw -> Int32 in
            guard let base = raw.baseAddress else { return 0 }
            var vectors = ranges.map { iovec(iov_base: base + $0.lowerBound, iov_len: $0.count) }
            return vectors.withUnsafeMutableBufferPointer { buffer in
                sd_journal_sendv(buffer.baseAddress, Int32(buffer.count))
            }
        }
    }
}
