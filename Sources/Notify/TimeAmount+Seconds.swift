import NIOCore

extension TimeAmount {
    /// `seconds` as a time amount, saturating: a caller's `.infinity` (or anything past a century) is a century,
    /// NaN and negative amounts are zero. `Int64(seconds * 1e9)` traps on the first two.
    static func seconds(saturating seconds: Double) -> TimeAmount {
        let century = 100 * 365 * 86_400.0
        guard seconds > 0 else { return .zero }  // also NaN
        return .nanoseconds(Int64(min(seconds, century) * 1e9))
    }
}
