#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A name or pattern compared byte for byte, as the protocol requires.
///
/// Swift's `String` equality follows Unicode canonical equivalence (`é` equals `e` + U+0301), so it must
/// not key the tables that route notifications: two different byte sequences are two different names.
package struct ExactName: Hashable, Sendable, CustomStringConvertible {
    /// The name.
    package let string: String

    /// Wraps `string`.
    package init(_ string: String) {
        self.string = string
    }

    /// Whether the two have the same bytes.
    package static func == (lhs: ExactName, rhs: ExactName) -> Bool {
        // Routing compares every post's name with its table entry: compare lengths, then memory, rather than
        // stepping through two `UTF8View`s (native strings are contiguous; the loop is only a fallback).
        let compared = lhs.string.utf8.withContiguousStorageIfAvailable { left in
            rhs.string.utf8.withContiguousStorageIfAvailable { right in
                UnsafeRawBufferPointer(left).bytesEqual(UnsafeRawBufferPointer(right))
            }
        }
        if let compared, let equal = compared { return equal }
        return lhs.string.utf8.elementsEqual(rhs.string.utf8)
    }

    /// Hashes the bytes, consistently with `==`.
    package func hash(into hasher: inout Hasher) {
        var string = string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// How this reads in logs and error messages.
    package var description: String { string }
}

extension UnsafeRawBufferPointer {
    /// Whether both buffers hold the same bytes.
    @inlinable @inline(__always)
    package func bytesEqual(_ other: UnsafeRawBufferPointer) -> Bool {
        guard count == other.count else { return false }
        guard count > 0, let left = baseAddress, let right = other.baseAddress else { return true }
        return memcmp(left, right, count) == 0
    }
}

extension Substring {
    /// Byte-for-byte equality (see ``ExactName``).
    @inlinable
    func bytesEqual(_ other: Substring) -> Bool {
        utf8.elementsEqual(other.utf8)
    }
}
