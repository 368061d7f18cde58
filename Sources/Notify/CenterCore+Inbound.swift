import NIOCore
import NotifyWire

// Frames from the daemon, dispatched on the I/O thread: answers complete pending requests, notifications go
// to delivery (CenterCore+Delivery.swift), connection frames to the state machine.
extension CenterCore {
    /// Handles one frame from `channel` (on the I/O thread).
    ///
    /// Notifications are staged in `staging` and reach their executors when the channel handler flushes it at
    /// the end of the read burst.
    func received(_ frame: ServerFrame, on channel: Channel, staging: DeliveryStaging) {
        switch frame {
        case .notification, .notificationMerged:
            break
        default:
            // Any other frame can complete something a caller waits on or reacts to (the PONG of `synchronize()`,
            // whose return promises that earlier notifications were handed to their executors; a current value,
            // which must come first; an OVERFLOW count; a connection event): what was read before it goes first.
            staging.flush()
            // An OVERFLOW count must reach the next notification of its subscription, which only the full path
            // attaches; ending the run at any such frame keeps the rule simple.
            staging.run.pointee.close()
        }
        switch frame {
        case .notification(let notification):
            deliver(notification, mergedCount: 0, staging: staging)
        case .notificationMerged(let mergedCount, let notification):
            deliver(notification, mergedCount: mergedCount, staging: staging)
        case .retained(ProtocolConstants.noRequest, let notification):
            // Request id 0 answers no request: a post made with retain, marked for a marks-retained subscription.
            deliverMarkedRetainedPost(notification, staging: staging)
        case .retained(let requestID, let notification):
            deliverRetained(notification, requestID: requestID)
        case .welcome(let welcome):
            handleWelcome(welcome, on: channel)
        case .ok(let requestID):
            handleOK(requestID, on: channel)
        case .state(let requestID, let value):
            answered(state.withLockedValue { $0.pending.remove(requestID) }, with: .success(.state(value)), on: channel)
        case .queryResultPart(let requestID, let json):
            state.withLockedValue { $0.pending.appendQueryPart(json, for: requestID) }
        case .queryResult(let requestID, let json):
            let (request, reply) = state.withLockedValue { $0.pending.completeQuery(requestID, last: json) }
            answered(request, with: .success(reply), on: channel)
        case .pong(let requestID):
            let (request, result) = state.withLockedValue { $0.pending.completeBarrier(requestID) }
            answered(request, with: result, on: channel)
        case .posted(let requestID, let sequence, let delivered):
            answered(
                state.withLockedValue { $0.pending.remove(requestID) },
                with: .success(.posted(PostReceipt(sequence: sequence, deliveredCount: Int(delivered)))), on: channel)
        case .overflow(let subscriptionID, let dropped):
            let pattern = state.withLockedValue {
                $0.registry.recordOverflow(subscriptionID: subscriptionID, dropped: dropped)
            }
            logger.warning(
                "the daemon dropped notifications for this client",
                metadata: ["count": "\(dropped)", "pattern": "\(pattern ?? "(connection)")"])
            emit(.notificationsDropped(count: dropped, pattern: pattern))
        case .stateChanged(let change):
            deliverStateChange(change)
        case .error(let error):
            handleError(error)
        case .goodbye(let goodbye):
            state.withLockedValue { $0.connection.receivedGoodbye(goodbye) }
            logger.info(
                "notifyd is shutting down",
                metadata: ["reason": "\(goodbye.reason)", "reconnectAfterMs": "\(goodbye.reconnectAfterMilliseconds)"])
        }
    }

    private func handleError(_ error: ErrorFrame) {
        if error.closesConnection {
            state.withLockedValue { $0.connection.receivedClosingError(error) }
            logger.notice("notifyd is closing the connection", metadata: ["error": "\(error)"])
            return
        }
        let request = state.withLockedValue { state -> PendingRequests.Request? in
            let request = state.pending.remove(error.requestID)
            if request?.isSuspension == true { state.connection.suspensionFailed() }
            // The next `synchronize()` reports refused subscriptions as its error.
            switch request {
            case .subscribe(let pattern): state.pending.rejectedSubscriptions.append((pattern, error))
            case .currentValue(let cores, _): state.pending.rejectedSubscriptions.append((cores[0].name, error))
            case .currentStates(let cores, _): state.pending.rejectedSubscriptions.append((cores[0].name, error))
            default: break
            }
            return request
        }
        request?.complete(with: .failure(NotifyError.rejected(code: error.code, message: error.message)))
        switch request {
        case .caller, .suspension:
            break
        case .subscribe(let pattern):
            reportRejectedSubscription(pattern, error)
        case .currentValue(let cores, _):
            reportRejectedSubscription(cores[0].name, error)
        case .currentStates(let cores, _):
            reportRejectedSubscription(cores[0].name, error)
        case .unsubscribe(let name):
            logger.debug("unsubscribe rejected", metadata: ["name": "\(name)", "error": "\(error)"])
        case .housekeeping(let operation):
            reportRejection(operation, error)
        case nil:
            reportRejection(error.requestID & 0x8000_0000 != 0 ? "post" : "request \(error.requestID)", error)
        }
    }

    private func reportRejectedSubscription(_ name: String, _ error: ErrorFrame) {
        logger.error("subscription rejected", metadata: ["name": "\(name)", "error": "\(error)"])
        emit(.requestRejected(operation: "subscribe to \(name)", error: error.description))
    }

    private func reportRejection(_ operation: String, _ error: ErrorFrame) {
        logger.error("request rejected", metadata: ["operation": "\(operation)", "error": "\(error)"])
        emit(.requestRejected(operation: operation, error: error.description))
    }

    /// Completes `request` with the daemon's answer; an answer of the wrong kind closes the connection (the
    /// library reconnects), as any other protocol error from the daemon does.
    private func answered(_ request: PendingRequests.Request?, with result: Result<Reply, Error>, on channel: Channel) {
        guard let request, !request.complete(with: result) else { return }
        logger.error("protocol error from the daemon: an answer of the wrong kind, closing")
        // Through the channel handler, which stops reading this burst and closes with the reason (as for any other
        // protocol error), so nothing read after it is delivered after the `disconnected` event.
        channel.pipeline.fireErrorCaught(WrongKindOfAnswer())
    }

    private func handleOK(_ requestID: UInt32, on channel: Channel) {
        let (request, schedule) = state.withLockedValue { state -> (PendingRequests.Request?, Bool) in
            let request = state.pending.remove(requestID)
            // The probe subscription only existed to fetch the current value: drop it again.
            let probe: UInt32? =
                switch request {
                case .currentValue(_, let probe), .currentStates(_, let probe): probe
                default: nil
                }
            guard let probe, state.channel != nil else { return (request, false) }
            let schedule = state.sendRequest(.housekeeping(operation: "unsubscribe current-value probe")) {
                .unsubscribe(requestID: $0, subscriptionID: probe)
            }
            return (request, schedule)
        }
        if schedule { scheduleFlush() }
        answered(request, with: .success(.ok), on: channel)
    }
}

/// A reply of another kind than its request expects: a protocol error from the daemon.
struct WrongKindOfAnswer: Error, CustomStringConvertible {
    var description: String { "protocol error from the daemon: an answer of the wrong kind" }
}
