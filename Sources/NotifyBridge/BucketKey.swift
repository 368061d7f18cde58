/// How a notification name becomes a key of the JetStream key-value bucket that mirrors state values and retained
/// notifications, and back.
///
/// A key holds only `A–Z a–z 0–9 - _ = / .` (what NATS's clients accept), while a name may hold any printable
/// character (PROTOCOL.md § 8). So the key is the kind (`state.` or `retained.`) plus the name with every other byte
/// of its UTF-8 written as `=XX` (hexadecimal, upper case), `=` and `/` included: `org.example.a/b` becomes
/// `state.org.example.a=2Fb`, and an ASCII name without those two stands as it is, readable in `nats kv ls`.
package enum BucketKey {
    /// What a key holds.
    package enum Kind: String, Sendable, CaseIterable {
        /// A state value: decimal text.
        case state
        /// A retained notification: its payload, its origin in the headers.
        case retained
    }

    /// The key for a name.
    package static func key(_ kind: Kind, name: String) -> String {
        var key = kind.rawValue + "."
        key.reserveCapacity(key.utf8.count + name.utf8.count)
        for byte in name.utf8 {
            if isKept(byte) {
                key.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                key += "=" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
            }
        }
        return key
    }

    /// The kind and name a key stands for, or nil for a key this mapping did not write (another prefix, a stray
    /// `=`, bytes that are not UTF-8).
    package static func parse(_ key: String) -> (kind: Kind, name: String)? {
        guard let kind = Kind.allCases.first(where: { key.hasPrefix($0.rawValue + ".") }) else { return nil }
        var bytes: [UInt8] = []
        var rest = key.utf8.dropFirst(kind.rawValue.utf8.count + 1)[...]
        while let byte = rest.popFirst() {
            guard byte == UInt8(ascii: "=") else {
                guard isKept(byte) else { return nil }
                bytes.append(byte)
                continue
            }
            // Only the one spelling this mapping writes: `=61` for `a` would make two keys of one name.
            guard let high = rest.popFirst().flatMap(hexValue), let low = rest.popFirst().flatMap(hexValue),
                !isKept(high << 4 | low)
            else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        guard !bytes.isEmpty, let name = String(validating: bytes, as: UTF8.self) else { return nil }
        return (kind, name)
    }

    private static func isKept(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
            true
        default:
            false
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
