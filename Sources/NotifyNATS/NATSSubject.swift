/// NATS subject rules as the server applies them: `.`-separated tokens, none empty, no white space; `*` (one
/// token) and `>` (one or more trailing tokens) as whole tokens are wildcards, allowed only when subscribing.
public enum NATSSubject {
    /// Whether `subject` may be published to: well-formed and without wildcards.
    public static func isValidPublishSubject(_ subject: String) -> Bool {
        isWellFormed(subject, wildcards: false)
    }

    /// Whether `subject` may be subscribed to: well-formed, `*` anywhere as a token, `>` only as the last token.
    public static func isValidSubscribeSubject(_ subject: String) -> Bool {
        isWellFormed(subject, wildcards: true)
    }

    /// Whether the published `subject` is delivered to a subscription on `pattern`, by NATS's rule.
    public static func matches(subject: String, pattern: String) -> Bool {
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

    private static func isWellFormed(_ subject: String, wildcards: Bool) -> Bool {
        let tokens = subject.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard !subject.isEmpty else { return false }
        for (index, token) in tokens.enumerated() {
            if token.isEmpty { return false }
            if token.contains(where: { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D || $0 == 0x0A }) { return false }
            let isStar = token.elementsEqual("*".utf8)
            let isTail = token.elementsEqual(">".utf8)
            if (isStar || isTail) && !wildcards { return false }
            if isTail && index != tokens.count - 1 { return false }
        }
        return true
    }
}
