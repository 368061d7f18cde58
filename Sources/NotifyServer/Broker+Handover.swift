import NotifyWire

extension Broker {
    /// The daemon-wide part of a hand-over snapshot (the peers' records are added by the caller, which knows
    /// their sockets).
    func handoverSnapshot(peers: [HandoverSnapshot.PeerRecord]) -> HandoverSnapshot {
        var counters = HandoverSnapshot.Counters()
        counters.connectionsAccepted = statistics.connectionsAccepted
        counters.posts = statistics.posts
        counters.deliveries = statistics.deliveries
        counters.merged = statistics.merged
        counters.dropped = statistics.dropped
        counters.slowConsumerDisconnects = statistics.slowConsumerDisconnects
        counters.acceptFailures = statistics.acceptFailures
        counters.connectionsRefused = statistics.connectionsRefused
        let (states, retained) = store.handoverRecords()
        return HandoverSnapshot(
            instanceID: instanceID, lastSequence: lastSequence, lastConnectionNumber: nextConnectionNumber,
            counters: counters, states: states, retained: retained, peers: peers.sorted { $0.number < $1.number })
    }

    /// Takes over the daemon-wide part of a predecessor's snapshot: sequence numbers and connection numbers go
    /// on from where it stopped, and its state values and retained notifications are this broker's.
    func restoreHandover(_ snapshot: HandoverSnapshot) {
        lastSequence = snapshot.lastSequence
        nextConnectionNumber = max(nextConnectionNumber, snapshot.lastConnectionNumber)
        statistics.connectionsAccepted = snapshot.counters.connectionsAccepted
        statistics.posts = snapshot.counters.posts
        statistics.deliveries = snapshot.counters.deliveries
        statistics.merged = snapshot.counters.merged
        statistics.dropped = snapshot.counters.dropped
        statistics.slowConsumerDisconnects = snapshot.counters.slowConsumerDisconnects
        statistics.acceptFailures = snapshot.counters.acceptFailures
        statistics.connectionsRefused = snapshot.counters.connectionsRefused
        store.restore(states: snapshot.states, retained: snapshot.retained, accounts: accounts)
    }
}
