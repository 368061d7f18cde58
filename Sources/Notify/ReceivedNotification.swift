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
