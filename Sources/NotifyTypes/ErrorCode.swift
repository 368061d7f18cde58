/// Why the daemon rejected a request or closed the connection: the code of its `ERROR` frame
/// (`NotifyError.rejected(code:message:)` in the `Notify` library). The raw value is the code's number in the protocol.
///
/// Codes marked *fatal* end the connection (the center reconnects by itself); the others answer one bad request.
public enum ErrorCode: UInt16, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Fatal. A frame's fields do not match its message type (truncated field, invalid UTF-8, trailing bytes),
    /// or the connection ended in the middle of a frame.
    case malformedFrame = 1
    /// Fatal. A length prefix announced a frame of zero bytes or larger than the daemon's `maxFrameLength`.
    case frameTooLarge = 2
    /// Fatal. The message type byte is not one the receiver accepts.
    case unknownMessageType = 3
    /// Fatal. The first frame on a connection was not `HELLO`.
    case handshakeRequired = 4
    /// Fatal. `HELLO` asked for a protocol version the daemon does not speak.
    case unsupportedVersion = 5
    /// Fatal. A second `HELLO` on a connection that already completed the handshake.
    case unexpectedHello = 6
    /// A name does not follow the name grammar (or is longer than the daemon's `maxNameLength`).
    case invalidName = 7
    /// A payload is longer than the daemon's `maxPayloadLength`.
    case payloadTooLarge = 8
    /// `UNSUBSCRIBE` named a subscription id this connection does not hold.
    case unknownSubscription = 9
    /// `SUBSCRIBE` reused a subscription id this connection already holds.
    case duplicateSubscription = 10
    /// `SUBSCRIBE` would exceed the daemon's `maxSubscriptions` for this connection.
    case tooManySubscriptions = 11
    /// A request set flag bits this protocol version does not define.
    case unsupportedFlags = 12
    /// Fatal. The connection could not keep up and its policy asked to be disconnected.
    case slowConsumer = 13
    /// The sender's credentials do not allow this request.
    case permissionDenied = 14
    /// A per-user quota would be exceeded.
    case quotaExceeded = 15
    /// Fatal. The daemon is shutting down; reconnect later.
    case shuttingDown = 16
    /// Fatal. The daemon hit an internal error while serving this connection.
    case internalError = 17
    /// The request's fields are well-formed but make no sense: an unknown policy or query kind, a queue limit
    /// of 0, `RESUME` without `SUSPEND`.
    case invalidRequest = 18
    /// Fatal, sent instead of `WELCOME`. The daemon cannot take another connection now (it has no file
    /// descriptor left); reconnect later.
    case unavailable = 19

    /// Whether the daemon closes the connection after sending this error.
    public var isFatal: Bool {
        switch self {
        case .malformedFrame, .frameTooLarge, .unknownMessageType, .handshakeRequired, .unsupportedVersion,
            .unexpectedHello, .slowConsumer, .shuttingDown, .internalError, .unavailable:
            return true
        case .invalidName, .payloadTooLarge, .unknownSubscription, .duplicateSubscription, .tooManySubscriptions,
            .unsupportedFlags, .permissionDenied, .quotaExceeded, .invalidRequest:
            return false
        }
    }

    /// The code's name as written in `protocol/PROTOCOL.md`, e.g. `invalid-name`.
    public var description: String {
        switch self {
        case .malformedFrame: "malformed-frame"
        case .frameTooLarge: "frame-too-large"
        case .unknownMessageType: "unknown-message-type"
        case .handshakeRequired: "handshake-required"
        case .unsupportedVersion: "unsupported-version"
        case .unexpectedHello: "unexpected-hello"
        case .invalidName: "invalid-name"
        case .payloadTooLarge: "payload-too-large"
        case .unknownSubscription: "unknown-subscription"
        case .duplicateSubscription: "duplicate-subscription"
        case .tooManySubscriptions: "too-many-subscriptions"
        case .unsupportedFlags: "unsupported-flags"
        case .slowConsumer: "slow-consumer"
        case .permissionDenied: "permission-denied"
        case .quotaExceeded: "quota-exceeded"
        case .shuttingDown: "shutting-down"
        case .internalError: "internal-error"
        case .invalidRequest: "invalid-request"
        case .unavailable: "unavailable"
        }
    }
}
