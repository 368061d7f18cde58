/// A daemon instance id: 16 random bytes the daemon chooses at every start, so that a client can tell a restarted
/// daemon from a reconnection to the same one (the `instance_id` of `WELCOME`).
public struct InstanceID: Sendable, Hashable, CustomStringConvertible {
    /// The first 8 bytes, big-endian.
    public var high: UInt64
    /// The last 8 bytes, big-endian.
    public var low: UInt64

    /// Creates an id from its two halves.
    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A fresh random id.
    package static func random() -> InstanceID {
        var generator = SystemRandomNumberGenerator()
        return InstanceID(high: generator.next(), low: generator.next())
    }

    /// 32 lowercase hex digits, as `notifyctl status` shows the daemon's instance.
    public var description: String {
        func hex(_ value: UInt64) -> String {
            let digits = String(value, radix: 16)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }
        return hex(high) + hex(low)
    }
}
