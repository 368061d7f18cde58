import Foundation
import NotifyWire

/// The credentials of the process that posted a notification, as the daemon's kernel reported them.
public typealias SenderCredentials = NotifyWire.SenderCredentials

/// A notification as an observer receives it.
public struct ReceivedNotification: Sendable, Hashable {
    /// The name it was posted under.
    public var name: String
    /// The payload bytes as posted.
    public var payload: [UInt8]
    /// The daemon's sequence number for the post: increases in delivery order; 0 for process-local names.
    public var sequence: UInt64
    /// Who posted it (pid, uid, gid), verified by the kernel, not claimed by the poster.
    public var sender: SenderCredentials
    /// Under the `coalesce` policy: how many earlier notifications on this name the daemon merged into this
    /// one while the observer could not keep up (0 normally).
    public var mergedCount: UInt64 = 0
    /// Under the `queue` policy: how many notifications of this subscription the daemon dropped just before
    /// this one (0 normally).
    public var droppedBefore: UInt64 = 0
    /// Whether this is the retained notification delivered as the current value when observing began
    /// (``ObservationOptions/receivesCurrentValue``), rather than a new post.
    public var isRetained = false

    /// Creates a notification value (the library creates these; tests and process-local posts may too).
    public init(name: String, payload: [UInt8], sequence: UInt64, sender: SenderCredentials) {
        self.name = name
        self.payload = payload
        self.sequence = sequence
        self.sender = sender
    }

    /// The payload as text, or `nil` if it is not valid UTF-8.
    public var payloadString: String? {
        String(validating: payload, as: UTF8.self)
    }

    /// The payload as `Data`.
    public var payloadData: Data { Data(payload) }
}
