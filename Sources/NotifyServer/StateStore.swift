import NIOCore
import NotifyWire

/// The state values set with `SET_STATE` and the last notification posted with `retain` on each name, each
/// charged to the user who set or posted it.
struct StateStore {
    /// Entries the pattern scans for current values have visited (a wrapping count): the connection asking pays
    /// for them in its turn's budget, as it does for pattern trie nodes.
    private(set) var entriesScanned = 0
    /// The last notification posted with `retain` on a name.
    struct RetainedNotification {
        var sequence: UInt64
        var sender: SenderCredentials
        var payload: ByteBuffer
        var ownerUID: UInt32
        /// The relay origin of a post made with the origin flag (PROTOCOL.md § 16.1).
        var origin: RelayOrigin?
    }

    private(set) var states: [ExactName: (value: UInt64, ownerUID: UInt32)] = [:]
    private(set) var retained: [ExactName: RetainedNotification] = [:]

    // MARK: State values

    func state(of name: String) -> UInt64? { states[ExactName(name)]?.value }

    /// Sets a state value; a name new to the store is charged to `account`.
    ///
    /// - Returns: why it cannot be set (the user's quota of state names is used up), or `nil`.
    mutating func setState(_ value: UInt64, for name: String, account: UserAccount) -> String? {
        let key = ExactName(name)
        if states[key] != nil {
            states[key]!.value = value
            return nil
        }
        if let denial = account.chargeStateName() { return denial }
        states[key] = (value, account.uid)
        return nil
    }

    /// The state values of every name `pattern` matches for which `mayObserve` holds, in ascending byte order of
    /// the names (a state subscription's current values).
    mutating func states(matching pattern: NotificationPattern, where mayObserve: (String) -> Bool) -> [(String, UInt64)] {
        let matches: [(String, UInt64)]
        if pattern.hasWildcards {
            entriesScanned &+= states.count
            matches = states.filter { pattern.matches($0.key.string) }.map { ($0.key.string, $0.value.value) }
        } else {
            matches = states[ExactName(pattern.text)].map { [(pattern.text, $0.value)] } ?? []
        }
        return matches.filter { mayObserve($0.0) }.sorted { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) }
    }

    // MARK: Retained notifications

    /// What keeping a retained notification costs beyond its payload and name, charged with them: an empty payload
    /// is not free (about 400 bytes of the daemon's memory per name, BENCHMARKS.md), so a user's quota bounds how
    /// many names it can fill as well as their payloads.
    static let retainedEntryCost = 512

    /// The bytes a retained notification of `payloadBytes` on `name` is charged (`retained-bytes-per-uid`).
    static func retainedCost(name: String, payloadBytes: Int) -> Int {
        payloadBytes + name.utf8.count + retainedEntryCost
    }

    /// Why `account`'s user may not retain a payload of `size` bytes on `name`, or `nil` if it may.
    func checkRetain(_ size: Int, name: String, account: UserAccount) -> String? {
        let replaced = retained[ExactName(name)].map {
            $0.ownerUID == account.uid ? Self.retainedCost(name: name, payloadBytes: $0.payload.readableBytes) : 0
        } ?? 0
        return account.checkRetained(Self.retainedCost(name: name, payloadBytes: size), replacing: replaced)
    }

    /// Keeps `payload` as `name`'s retained notification, charged to its sender (see ``checkRetain(_:name:account:)``).
    mutating func retain(
        name: String, payload: ByteBuffer, sender: SenderCredentials, origin: RelayOrigin? = nil, sequence: UInt64,
        accounts: UserAccounts
    ) {
        let key = ExactName(name)
        if let previous = retained[key] {
            accounts.account(for: previous.ownerUID).chargeRetained(
                -Self.retainedCost(name: name, payloadBytes: previous.payload.readableBytes))
        }
        // Own copy: the decoded payload is a slice of the peer's read buffer.
        var copy = ByteBufferAllocator().buffer(capacity: payload.readableBytes)
        copy.writeImmutableBuffer(payload)
        retained[key] = RetainedNotification(
            sequence: sequence, sender: sender, payload: copy, ownerUID: sender.uid, origin: origin)
        accounts.account(for: sender.uid).chargeRetained(Self.retainedCost(name: name, payloadBytes: payload.readableBytes))
    }

    // MARK: Hand-over

    /// The state values and retained notifications, for a hand-over snapshot.
    func handoverRecords() -> (states: [HandoverSnapshot.State], retained: [HandoverSnapshot.Retained]) {
        let states = self.states.map { HandoverSnapshot.State(name: $0.key.string, value: $0.value.value, ownerUID: $0.value.ownerUID) }
        let retained = self.retained.map { name, entry in
            HandoverSnapshot.Retained(
                name: name.string, sequence: entry.sequence, sender: entry.sender, ownerUID: entry.ownerUID,
                payload: Array(entry.payload.readableBytesView), origin: entry.origin)
        }
        return (states.sorted { $0.name < $1.name }, retained.sorted { $0.sequence < $1.sequence })
    }

    /// Takes over a predecessor's values, charged to their owners again without checking quotas.
    mutating func restore(
        states: [HandoverSnapshot.State], retained: [HandoverSnapshot.Retained], accounts: UserAccounts
    ) {
        for state in states {
            self.states[ExactName(state.name)] = (state.value, state.ownerUID)
            accounts.account(for: state.ownerUID).chargeRestored(stateNames: 1)
        }
        for entry in retained {
            self.retained[ExactName(entry.name)] = RetainedNotification(
                sequence: entry.sequence, sender: entry.sender, payload: ByteBuffer(bytes: entry.payload),
                ownerUID: entry.ownerUID, origin: entry.origin)
            accounts.account(for: entry.ownerUID).chargeRetained(
                Self.retainedCost(name: entry.name, payloadBytes: entry.payload.count))
        }
    }

    /// The retained notifications of every name `pattern` matches, oldest first, for which `mayObserve` holds,
    /// each with its origin if it has one (the caller removes it for a peer that did not ask for origins).
    mutating func retainedNotifications(
        matching pattern: NotificationPattern, where mayObserve: (String) -> Bool
    ) -> [NotificationFrame] {
        let matches: [(String, RetainedNotification)]
        if pattern.hasWildcards {
            entriesScanned &+= retained.count
            matches = retained.filter { pattern.matches($0.key.string) }.map { ($0.key.string, $0.value) }
        } else {
            matches = retained[ExactName(pattern.text)].map { [(pattern.text, $0)] } ?? []
        }
        return matches
            .filter { name, _ in mayObserve(name) }
            .sorted { $0.1.sequence < $1.1.sequence }
            .map { name, entry in
                NotificationFrame(
                    sequence: entry.sequence, sender: entry.sender, name: name, payload: entry.payload,
                    origin: entry.origin)
            }
    }
}
