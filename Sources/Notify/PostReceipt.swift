/// The daemon's answer to an acknowledged post.
public struct PostReceipt: Sendable, Hashable {
    /// The sequence number the daemon gave the notification.
    public var sequence: UInt64
    /// How many connections (processes, or centers) it was delivered to.
    public var deliveredCount: Int

    /// Creates a receipt.
    public init(sequence: UInt64, deliveredCount: Int) {
        self.sequence = sequence
        self.deliveredCount = deliveredCount
    }
}
