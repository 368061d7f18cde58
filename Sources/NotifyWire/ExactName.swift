/// A name or pattern compared byte for byte, as the protocol requires.
///
/// Swift's `String` equality follows Unicode canonical equivalence (`é` equals `e` + U+0301), so it must
/// not key the tables that route notifications: two different byte sequences are two different names.
public struct ExactName: Hashable, Sendable, CustomStringConvertible {
    /// The name.
    public let string: String

    /// Wraps `string`.
    public init(_ string: String) {
        self.string = string
    }

    public static func == (lhs: ExactName, rhs: ExactName) -> Bool {
        lhs.string.utf8.elementsEqual(rhs.string.utf8)
    }

    public func hash(into hasher: inout Hasher) {
        var string = string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }

    public var description: String { string }
}

extension Substring {
    /// Byte-for-byte equality (see ``ExactName``).
    @inlinable
    func bytesEqual(_ other: Substring) -> Bool {
        utf8.elementsEqual(other.utf8)
    }
}
