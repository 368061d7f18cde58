/// Why a NATS client call failed.
package enum NATSClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A server URL that cannot be read.
    case invalidURL(String)
    /// A subject that is not valid for the operation (publish: no wildcards; subscribe: wildcards as tokens).
    case invalidSubject(String)
    /// A payload (with its headers) larger than the server's `max_payload`.
    case payloadTooLarge(size: Int, limit: Int)
    /// The client was closed.
    case closed
    /// No connection, or no reply, came within the time asked for.
    case timedOut(String)
    /// A request found no subscriber on its subject: the server answered with status 503 (`NATS/1.0 503`).
    case noResponders(String)
    /// A request was not sent because the outbox was full (``NATSClient/Configuration/maxPendingBytes``).
    case outboxFull

    /// One line for logs and error messages.
    package var description: String {
        switch self {
        case .invalidURL(let url): "invalid NATS URL '\(url)' (expected nats://[user:password@]host[:port])"
        case .invalidSubject(let subject): "invalid NATS subject '\(subject)'"
        case .payloadTooLarge(let size, let limit): "payload of \(size) bytes exceeds the server's max_payload \(limit)"
        case .closed: "the NATS client is closed"
        case .timedOut(let what): "timed out: \(what)"
        case .noResponders(let subject): "no responders on NATS subject '\(subject)'"
        case .outboxFull: "the NATS outbox is full: request not sent"
        }
    }
}
