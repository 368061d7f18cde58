/// The message type byte that follows every frame's length prefix.
///
/// Client-to-daemon types are below `0x80`; daemon-to-client types have the high bit set.
@usableFromInline
package enum MessageType: UInt8, Sendable, Hashable, CaseIterable {
    // Client to daemon.
    case hello = 0x01
    case subscribe = 0x02
    case unsubscribe = 0x03
    case post = 0x04
    case ping = 0x05
    case setState = 0x06
    case getState = 0x07
    case suspend = 0x08
    case resume = 0x09
    case query = 0x0A

    // Daemon to client.
    case welcome = 0x81
    case ok = 0x82
    case posted = 0x83
    case pong = 0x84
    case notification = 0x85
    case overflow = 0x86
    case state = 0x87
    case goodbye = 0x88
    case notificationMerged = 0x89
    case retained = 0x8A
    case queryResult = 0x8B
    case queryResultPart = 0x8C
    case stateChanged = 0x8D
    case error = 0x8F

    /// Whether a client sends this type (as opposed to the daemon).
    package var isClientToDaemon: Bool { rawValue < 0x80 }
}

extension MessageType: CustomStringConvertible {
    /// The message's name as written in `protocol/PROTOCOL.md`, e.g. `POST`.
    @usableFromInline
    package var description: String {
        switch self {
        case .hello: "HELLO"
        case .subscribe: "SUBSCRIBE"
        case .unsubscribe: "UNSUBSCRIBE"
        case .post: "POST"
        case .ping: "PING"
        case .setState: "SET_STATE"
        case .getState: "GET_STATE"
        case .suspend: "SUSPEND"
        case .resume: "RESUME"
        case .query: "QUERY"
        case .welcome: "WELCOME"
        case .ok: "OK"
        case .posted: "POSTED"
        case .pong: "PONG"
        case .notification: "NOTIFICATION"
        case .overflow: "OVERFLOW"
        case .state: "STATE"
        case .goodbye: "GOODBYE"
        case .notificationMerged: "NOTIFICATION_MERGED"
        case .retained: "RETAINED"
        case .queryResult: "QUERY_RESULT"
        case .queryResultPart: "QUERY_RESULT_PART"
        case .stateChanged: "STATE_CHANGED"
        case .error: "ERROR"
        }
    }
}
