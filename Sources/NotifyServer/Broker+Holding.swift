import NIOCore

/// Peers holding notifications are offered a release regularly, since one held back by its user's quota (not its
/// own queue) gets no write completion to trigger one.
extension Broker {
    /// Offers every holding peer a release of what it holds.
    func releaseHeldPeers() {
        for peer in Array(holding.values) { releaseHeld(peer) }
    }

    /// Moves what `peer` holds into its outbound bytes, if it has room now, and flushes them.
    func releaseHeld(_ peer: Peer) {
        let holdingSince = peer.queue.holdingSince
        guard peer.isOpen, case .released(let caughtUp) = peer.queue.releaseHeld() else { return }
        if caughtUp {
            if let holdingSince { metrics.holdingDuration.record(.nanoseconds((NIODeadline.now() - holdingSince).nanoseconds)) }
            holding.removeValue(forKey: peer.number)
            peer.logger.info("caught up, no notifications held any more")
        }
        flush(peer)
    }

    /// Offers `peer` releases from now on (it was handed over holding notifications).
    func startedHolding(_ peer: Peer) {
        holding[peer.number] = peer
    }

    /// Stops offering `peer` releases (it sent or discarded everything it held).
    func stoppedHolding(_ peer: Peer) {
        holding.removeValue(forKey: peer.number)
    }
}
