import NotifyWire

// A peer's state subscriptions (SUBSCRIBE with the states flag, PROTOCOL.md § 6.2, § 9.6): current values sent
// before the OK, and the slow-consumer close when a STATE_CHANGED does not fit.
extension Peer {
    /// Queues a `STATE_CHANGED` with the current flag and `requestID` for every name `pattern` matches that has a
    /// state value and that this peer may observe, in byte order of the names: part of the `SUBSCRIBE`'s reply,
    /// so never held or checked against the bound (like `RETAINED`).
    func sendCurrentStates(matching pattern: NotificationPattern, requestID: UInt32) {
        for (name, value) in broker.store.states(matching: pattern, where: { broker.mayObserve($0, identity) }) {
            queue.appendWithoutCheck(
                .stateChanged(
                    StateChangedFrame(
                        requestID: requestID, isCurrent: true, value: value,
                        sender: SenderCredentials(pid: 0, uid: 0, gid: 0), name: name)))
        }
    }

    /// Closes with `ERROR slow-consumer`: the `STATE_CHANGED` of `name` would take the peer past its bound, and
    /// such frames are never dropped.
    func disconnectSlowStateWatcher(name: String) {
        logger.warning("disconnecting slow consumer of state changes", metadata: ["name": "\(name)"])
        closeAsSlowConsumer(
            "the client did not read fast enough (over \(queue.limit) bytes pending) to take the state change of "
                + "'\(name)', and state changes are never dropped")
    }

    /// Closes with `ERROR slow-consumer`: the marked `RETAINED(0)` of a post to `name` (PROTOCOL.md § 9.5) would
    /// take the peer past its bound, and such frames are never dropped.
    func disconnectSlowRetainedMarker(name: String) {
        logger.warning("disconnecting slow consumer of marked retained posts", metadata: ["name": "\(name)"])
        closeAsSlowConsumer(
            "the client did not read fast enough (over \(queue.limit) bytes pending) to take the retained post to "
                + "'\(name)' that a marks-retained subscription asked for, and those are never dropped")
    }
}
