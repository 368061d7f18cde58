/// A state value of a name observed with ``NotifyCenter/observeStates(_:sendingCurrent:on:isolation:handler:)``:
/// a change some process made with ``NotifyCenter/setState(_:for:)``, or the value the name had when the
/// observation started (``isCurrent``).
public struct StateChange: Sendable, Hashable, CustomStringConvertible {
    /// The name whose state value it is (one the observed pattern matches).
    public var name: String
    /// The state value.
    public var value: UInt64
    /// Who set the value, as the daemon's kernel reported it; `nil` for a current value (``isCurrent``), whose
    /// setter the daemon does not keep.
    public var sender: SenderCredentials?
    /// Whether this is the value the name had when the observation started rather than a change.
    public var isCurrent: Bool

    /// Creates a state change (for tests of code that handles them).
    public init(name: String, value: UInt64, sender: SenderCredentials?, isCurrent: Bool) {
        self.name = name
        self.value = value
        self.sender = sender
        self.isCurrent = isCurrent
    }

    /// How this reads in logs: `org.example.level = 7 (set by pid 1234 uid 1000 gid 1000)`.
    public var description: String {
        "\(name) = \(value) (" + (sender.map { "set by \($0)" } ?? "current value") + ")"
    }
}
