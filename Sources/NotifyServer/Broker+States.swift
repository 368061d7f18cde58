import NIOCore
import NotifyWire

// State subscriptions (SUBSCRIBE with the states flag, PROTOCOL.md § 9.6): every successful SET_STATE is announced
// to the peers watching the name as one STATE_CHANGED each, encoded once.
extension Broker {
    /// Announces that `setter` set `name`'s state value to `value`: queues a `STATE_CHANGED` for every peer watching
    /// the name (once per peer however many of its state subscriptions match). The work is the index lookup and the
    /// matching watchers, nothing else.
    ///
    /// A `STATE_CHANGED` is never held, merged or dropped: it goes straight to the peer's outbound bytes, even while
    /// the peer is suspended or holding notifications. A peer that cannot take it within its bound (or its user's
    /// outbound quota) is closed as a slow consumer.
    func announceStateChange(name: String, value: UInt64, setter: Peer) {
        var frame: ByteBuffer?
        forEachStateWatcher(of: name, setter: setter) { peer in
            guard peer.isOpen else { return }
            if frame == nil {
                // Encoded only once somebody watches, and then once for all of them.
                var encoded = ByteBufferAllocator().buffer(
                    capacity: StateChangedFrame.encodedLength(nameByteCount: name.utf8.count))
                ServerFrame.stateChanged(
                    StateChangedFrame(requestID: 0, isCurrent: false, value: value, sender: setter.credentials, name: name)
                ).encode(into: &encoded)
                frame = encoded
            }
            queueUnheld(frame!, for: peer) { $0.disconnectSlowStateWatcher(name: name) }
        }
    }

    /// Queues `frame`, one that is never held, merged or dropped (`STATE_CHANGED`, a marked `RETAINED(0)`), for
    /// `peer` at once, even while it is suspended or holding notifications; when it does not fit within the peer's
    /// bound or its user's outbound quota, closes the peer with `close` (as a slow consumer).
    ///
    /// - Returns: whether it was queued.
    @discardableResult
    func queueUnheld(_ frame: ByteBuffer, for peer: Peer, orClose close: (Peer) -> Void) -> Bool {
        var taken = peer.queue.queueUnheld(frame)
        if taken == nil, peer.queue.hasUnflushedBytes {
            // Bytes of this read burst not yet handed to the socket count as pending: hand them over now (a
            // write the socket takes at once frees its bytes) before judging the peer too slow.
            flush(peer)
            guard peer.isOpen else { return false }
            taken = peer.queue.queueUnheld(frame)
        }
        guard let flushNow = taken else {
            statistics.slowConsumerDisconnects += 1
            close(peer)
            return false
        }
        flushNow ? flush(peer) : markDirty(peer)
        return true
    }
}
