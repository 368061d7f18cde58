import NIOCore
import NotifyWire

/// A test helper's loud failure: a wait that timed out, a frame that was not the one expected, a connection
/// that ended too early.
struct TestFailure: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}

/// How long any single wait in these tests may take before the test fails.
let defaultTimeout = TimeAmount.seconds(10)

extension TimeAmount {
    /// The amount in seconds, for messages.
    var secondsDescription: String {
        let seconds = Double(nanoseconds) / 1e9
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }
}

extension NotificationFrame {
    /// The fields of a notification for failure messages (the payload summarised by size).
    var summaryFields: String {
        "sequence \(sequence), '\(name)', \(payload.readableBytes) payload bytes"
    }
}

extension ServerFrame {
    /// A short description for failure messages (payloads summarised by size).
    var summary: String {
        if case .queryResult(let requestID, let json) = self {
            return "QUERY_RESULT(request \(requestID), \(json.readableBytes) JSON bytes)"
        }
        switch self {
        case .welcome(let welcome):
            return "WELCOME(version \(welcome.version), pid \(welcome.daemonPID), instance \(welcome.instanceID))"
        case .ok(let requestID):
            return "OK(\(requestID))"
        case .posted(let requestID, let sequence, let deliveredCount):
            return "POSTED(request \(requestID), sequence \(sequence), delivered \(deliveredCount))"
        case .pong(let requestID):
            return "PONG(\(requestID))"
        case .notification(let notification):
            return "NOTIFICATION(\(notification.summaryFields))"
        case .notificationMerged(let mergedCount, let notification):
            return "NOTIFICATION_MERGED(merged \(mergedCount), \(notification.summaryFields))"
        case .retained(let requestID, let notification):
            return "RETAINED(request \(requestID), \(notification.summaryFields))"
        case .overflow(let subscriptionID, let droppedCount):
            return "OVERFLOW(subscription \(subscriptionID), dropped \(droppedCount))"
        case .state(let requestID, let value):
            return "STATE(request \(requestID), \(value.map { "value \($0)" } ?? "no value"))"
        case .error(let error):
            return "ERROR(request \(error.requestID), \(error), closing \(error.closesConnection))"
        case .goodbye(let goodbye):
            return "GOODBYE(reconnect after \(goodbye.reconnectAfterMilliseconds) ms, '\(goodbye.reason)')"
        default:
            // QUERY_RESULT (above), and frame types added to the protocol after this was written, so that a new
            // frame type does not stop the suite from compiling.
            return "\(messageType)"
        }
    }

    /// The notification fields, if this is a `NOTIFICATION`.
    var notification: NotificationFrame? {
        if case .notification(let notification) = self { return notification }
        return nil
    }

    /// The error fields, if this is an `ERROR`.
    var errorFrame: ErrorFrame? {
        if case .error(let error) = self { return error }
        return nil
    }
}
