/// NATS subject rules as the server applies them: `.`-separated tokens, none empty, no white space; `*` (one
/// token) and `>` (one or more trailing tokens) as whole tokens are wildcards, allowed only when subscribing.
package enum NATSSubject {
    /// Whether `subject` may be published to: well-formed and without wildcards.
    package static func isValidPublishSubject(_ subject: String) -> Bool {
        isWellFormed(subject, wildcards: false)
    }

    /// Whether `subject` may be subscribed to: well-formed, `*` anywhere as a token, `>` only as the last token.
    package static func isValidSubscribeSubject(_ subject: String) -> Bool {
        isWellFormed(subject, wildcards: true)
    }

    /// Whether the published `subject` is delivered to a subscription on `pattern`, by NATS's rule.
    package static func matches(subject: String, pattern: String) -> Bool {
        let names = subject.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        let patterns = pattern.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        for (index, token) in patterns.enumerated() {
            if token.elementsEqual(">".utf8) { return names.count > index }
            guard index < names.count else { return false }
            if token.elementsEqual("*".utf8) { continue }
            if !token.elementsEqual(names[index]) { return false }
        }
        return names.count == patterns.count
    }

    /// One pass over the bytes, no allocation: publishing checks every subject.
    private static func isWellFormed(_ subject: String, wildcards: Bool) -> Bool {
        var tokenLength = 0
        var firstByte: UInt8 = 0
        func tokenIsWildcard() -> Bool {
            tokenLength == 1 && (firstByte == UInt8(ascii: "*") || firstByte == UInt8(ascii: ">"))
        }
        for byte in subject.utf8 {
            switch byte {
            case UInt8(ascii: "."):
                if tokenLength == 0 { return false }
                // A wildcard token followed by more: allowed for `*` when subscribing, never for `>`.
                if tokenIsWildcard() && (!wildcards || firstByte == UInt8(ascii: ">")) { return false }
                tokenLength = 0
            case 0x20, 0x09, 0x0D, 0x0A:
                return false
            default:
                if tokenLength == 0 { firstByte = byte }
                tokenLength += 1
            }
        }
        if tokenLength == 0 { return false }
        return wildcards || !tokenIsWildcard()
    }
}
