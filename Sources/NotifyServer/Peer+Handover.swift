import NotifyWire

extension Peer {
    /// This connection as a hand-over record. What is held is queued first, so the record carries every byte owed
    /// to the client, in order; the channel says how many of the bytes it took it has not written yet.
    func handoverRecord(cookie: UInt64, unwrittenInChannel: Int, inbound: [UInt8]) -> HandoverSnapshot.PeerRecord {
        let (owed, held) = queue.owedBytesForHandover(unwrittenInChannel: unwrittenInChannel)
        broker.stoppedHolding(self)
        isHandedOver = true
        let recordPhase: HandoverSnapshot.Phase =
            switch phase {
            case .awaitingHello: .awaitingHello
            case .open: .open
            case .closing, .closed: .closing
            }
        return HandoverSnapshot.PeerRecord(
            cookie: cookie, number: number, credentials: credentials, groups: identity.groups.sorted(),
            command: command, phase: recordPhase, clientName: clientName, helloFlags: helloFlags,
            suspendCount: UInt32(queue.suspendCount),
            merged: queue.merged, dropped: queue.dropped,
            subscriptions: subscriptionRecords(),
            outbound: owed, held: held, inbound: inbound)
    }

    /// Every subscription, to notifications and to state values, by id.
    private func subscriptionRecords() -> [HandoverSnapshot.Subscription] {
        func records(_ table: SubscriptionTable, watchesStates: Bool) -> [HandoverSnapshot.Subscription] {
            table.all.map { entry in
                HandoverSnapshot.Subscription(
                    id: entry.id, pattern: entry.subscription.text, policy: entry.subscription.policy,
                    watchesStates: watchesStates, marksRetained: table.marksRetained(entry.id))
            }
        }
        return (records(subscriptions, watchesStates: false) + records(stateSubscriptions, watchesStates: true))
            .sorted { $0.id < $1.id }
    }
}
