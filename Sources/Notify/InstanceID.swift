import NotifyWire

/// A daemon instance id: 16 random bytes the daemon chooses at every start, so that a center can tell a restarted
/// daemon from a reconnection to the same one (``ConnectionEvent/connected(daemonRestarted:instanceID:)``).
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

    /// The id a `WELCOME` frame carries.
    init(_ wire: NotifyWire.InstanceID) {
        self.init(high: wire.high, low: wire.low)
    }

    /// 32 lowercase hex digits, as `notifyctl status` shows the daemon's instance (``DaemonStatus/instanceID``).
    public var description: String { NotifyWire.InstanceID(high: high, low: low).description }
}
