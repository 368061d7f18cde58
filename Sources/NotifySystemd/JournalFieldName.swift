/// The journal's rules for field names, and the mapping from arbitrary keys (log metadata) to valid names.
///
/// A valid name is 1 to 64 characters of `A`–`Z`, `0`–`9` and `_`, and starts with neither a digit nor an
/// underscore (names starting with `_` are reserved for fields the journal adds itself, such as `_PID`; the
/// journal drops them when a client sends them).
package enum JournalFieldName {
    /// The longest valid field name.
    package static let maxLength = 64

    /// Whether `name` is a valid journal field name.
    package static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, bytes.count <= maxLength else { return false }
        guard isUppercaseLetter(first) else { return false }
        return bytes.allSatisfy { isUppercaseLetter($0) || isDigit($0) || $0 == UInt8(ascii: "_") }
    }

    /// Maps any key to a valid field name, deterministically.
    ///
    /// Letters are upper-cased, a lower-to-upper case change (`camelCase`) becomes an underscore, and every run
    /// of other characters (`.`, `-`, spaces, non-ASCII) becomes one underscore. Leading and trailing
    /// underscores are dropped, a name that would start with a digit gets the prefix `F_`, an empty result
    /// becomes `FIELD`, and the result is cut to 64 characters. Examples: `pid` → `PID`, `client.name` →
    /// `CLIENT_NAME`, `daemonRestarted` → `DAEMON_RESTARTED`, `_secret` → `SECRET`, `2fa` → `F_2FA`.
    package static func make(from key: String) -> String {
        var output: [UInt8] = []
        var previous: UInt8?
        for scalar in key.unicodeScalars {
            let byte: UInt8? = scalar.isASCII ? UInt8(scalar.value) : nil
            if let byte, isUppercaseLetter(byte) || isLowercaseLetter(byte) || isDigit(byte) {
                if isUppercaseLetter(byte), let previous, isLowercaseLetter(previous) || isDigit(previous) {
                    appendUnderscore(&output)
                }
                output.append(isLowercaseLetter(byte) ? byte - 32 : byte)
                previous = byte
            } else {
                appendUnderscore(&output)
                previous = nil
            }
        }
        while output.first == UInt8(ascii: "_") { output.removeFirst() }
        if let first = output.first, isDigit(first) { output.insert(contentsOf: Array("F_".utf8), at: 0) }
        if output.count > maxLength { output.removeLast(output.count - maxLength) }
        while output.last == UInt8(ascii: "_") { output.removeLast() }
        return output.isEmpty ? "FIELD" : String(decoding: output, as: UTF8.self)
    }

    /// `base` if it is not in `used`, else `base_2`, `base_3`, … (cut so that the whole stays within 64
    /// characters). The result is inserted into `used`.
    package static func unique(_ base: String, in used: inout Set<String>) -> String {
        if used.insert(base).inserted { return base }
        var counter = 2
        while true {
            let suffix = "_\(counter)"
            let name = String(base.prefix(maxLength - suffix.count)) + suffix
            if used.insert(name).inserted { return name }
            counter += 1
        }
    }

    private static func appendUnderscore(_ output: inout [UInt8]) {
        if !output.isEmpty, output.last != UInt8(ascii: "_") { output.append(UInt8(ascii: "_")) }
    }

    private static func isUppercaseLetter(_ byte: UInt8) -> Bool { byte >= 65 && byte <= 90 }
    private static func isLowercaseLetter(_ byte: UInt8) -> Bool { byte >= 97 && byte <= 122 }
    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 48 && byte <= 57 }
}
