/// The fields of `GOODBYE` (0x88): the daemon is shutting down gracefully.
///
/// It is the last frame on the connection, after every notification that was queued for it; the daemon closes
/// the connection right after it. A client reconnects calmly: it waits ``reconnectAfterMilliseconds`` before its
/// first attempt instead of failing attempts in a hurry while the daemon (or its successor) starts.
package struct GoodbyeFrame: Sendable, Hashable, CustomStringConvertible {
    /// How long the client should wait before its first reconnection attempt, in milliseconds.
    package var reconnectAfterMilliseconds: UInt32
    /// A human-readable explanation for logs; at most ``maxReasonLength`` bytes; not meant to be parsed.
    package var reason: String

    /// The longest reason the daemon sends, in UTF-8 bytes (like `ERROR`'s message).
    package static let maxReasonLength = ErrorFrame.maxMessageLength

    /// Creates the fields of `GOODBYE`; a longer reason is cut at a character boundary.
    package init(reconnectAfterMilliseconds: UInt32, reason: String) {
        self.reconnectAfterMilliseconds = reconnectAfterMilliseconds
        self.reason = reason.truncatedUTF8(maxBytes: Self.maxReasonLength)
    }

    /// How this reads in logs and error messages.
    package var description: String {
        "goodbye: \(reason) (reconnect after \(reconnectAfterMilliseconds) ms)"
    }
}
