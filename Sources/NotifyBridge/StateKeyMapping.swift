/// How a notification name becomes a key of the JetStream key-value bucket that mirrors state values, and back.
///
/// A key holds only `A–Z a–z 0–9 - _ = / .` (what NATS's clients accept), while a name may hold any printable
/// character (PROTOCOL.md § 8). So the key is `state.` plus the name with every other byte of its UTF-8 written as
/// `=XX` (hexadecimal, upper case), `=` and `/` included: `org.example.a/b` becomes `state.org.example.a=2Fb`, and
/// an ASCII name without those two is its own key, readable in `nats kv ls`.
package enum StateKeyMapping {
    /// The key prefix that sets state values apart from anything else a bucket may hold.
    package static let prefix = "state."

    /// The key for a name.
    package static func key(forName name: String) -> String {
        var key = prefix
        key.reserveCapacity(prefix.utf8.count + name.utf8.count)
        for byte in name.utf8 {
            if isKept(byte) {
                key.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                key += "=" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
            }
        }
        return key
    }

    /// The name a key stands for, or nil for a key this mapping did not write (another prefix, a stray `=`).
    package static func name(forKey key: String) -> String? {
        guard key.hasPrefix(prefix) else { return nil }
        var bytes: [UInt8] = []
        var rest = key.utf8.dropFirst(prefix.utf8.count)[...]
        while let byte = rest.popFirst() {
            guard byte == UInt8(ascii: "=") else {
                guard isKept(byte) else { return nil }
                bytes.append(byte)
                continue
            }
            guard let high = rest.popFirst().flatMap(hexValue), let low = rest.popFirst().flatMap(hexValue) else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        guard !bytes.isEmpty else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The key pattern of the names a notifyd pattern matches: wildcard labels stay wildcards.
    package static func key(forPattern pattern: String) -> String {
        prefix + pattern.split(separator: ".", omittingEmptySubsequences: false).map { label in
            label == "*" || label == ">" ? String(label) : String(key(forName: String(label)).dropFirst(prefix.count))
        }.joined(separator: ".")
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
