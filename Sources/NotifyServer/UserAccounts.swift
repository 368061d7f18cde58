/// What all of one user's connections hold together. Each resource's owner charges it here (a peer its
/// connection and subscriptions, a delivery queue its bytes, the state store its names and retained bytes) and
/// gives the charge back when the resource goes.
final class UserAccount {
    let uid: UInt32
    /// The quotas in force, kept in step by the registry (a configuration reload changes them): a copy, since
    /// every delivery reads the outbound quota.
    fileprivate(set) var quotas: AccessConfiguration.Quotas
    private(set) var connections = 0
    private(set) var subscriptions = 0
    /// Labels of this user's patterns in the pattern trie (see ``PatternTrie/cost(of:)``).
    private(set) var patternLabels = 0
    /// Bytes queued or held for all of this user's connections.
    fileprivate(set) var outboundBytes = 0
    /// Bytes charged for the retained notifications this user posted last on their names: payload, name and
    /// ``StateStore/retainedEntryCost`` each.
    private(set) var retainedBytes = 0
    private(set) var stateNames = 0

    fileprivate init(uid: UInt32, quotas: AccessConfiguration.Quotas) {
        self.uid = uid
        self.quotas = quotas
    }

    /// Root is not subject to quotas.
    var isExempt: Bool { uid == 0 }

    /// Bytes this user's connections may still have queued or held beyond what they have.
    var outboundRoom: Int { isExempt ? .max : quotas.outboundBytesPerUID - outboundBytes }

    /// Charges one connection, unless the user has the most allowed (the charge is made all the same: the
    /// connection is refused and closed, and gives it back like any other).
    ///
    /// - Returns: why the connection is refused, or `nil`.
    func chargeConnection() -> String? {
        connections += 1
        let quota = quotas.connectionsPerUID
        guard !isExempt, connections > quota else { return nil }
        return "uid \(uid) already has the maximum of \(quota) connections (quota connections-per-uid)"
    }

    func releaseConnection() { connections -= 1 }

    /// Charges what a predecessor daemon had charged, without checking quotas (a hand-over keeps everything a
    /// user had, even if a reload lowered a quota since).
    func chargeRestored(connections: Int = 0, subscriptions: Int = 0, patternLabels: Int = 0, stateNames: Int = 0) {
        self.connections += connections
        self.subscriptions += subscriptions
        self.patternLabels += patternLabels
        self.stateNames += stateNames
    }

    /// Charges one subscription and the pattern labels it adds to the trie (0 for an exact name, or a pattern
    /// the connection already has), unless that exceeds a quota: then nothing is charged.
    ///
    /// - Returns: why the subscription is refused, or `nil`.
    func chargeSubscription(patternLabels labels: Int) -> String? {
        if !isExempt {
            if let denial = subscriptionRefusal() { return denial }
            let labelQuota = quotas.patternLabelsPerUID
            if labels > 0, patternLabels + labels > labelQuota {
                return "uid \(uid)'s patterns already hold \(patternLabels) labels and this one has \(labels); "
                    + "the maximum is \(labelQuota) (quota pattern-labels-per-uid)"
            }
        }
        subscriptions += 1
        patternLabels += labels
        return nil
    }

    /// Why the user may not hold one more subscription (checked before the access rules, as a full quota is the
    /// answer whatever the name), or `nil`.
    func subscriptionRefusal() -> String? {
        let quota = quotas.subscriptionsPerUID
        guard !isExempt, subscriptions >= quota else { return nil }
        return "uid \(uid) already holds the maximum of \(quota) subscriptions (quota subscriptions-per-uid)"
    }

    func releaseSubscriptions(_ count: Int, patternLabels labels: Int) {
        subscriptions -= count
        patternLabels -= labels
    }

    /// Charges a state name, unless the user set the most allowed.
    ///
    /// - Returns: why the state cannot be set, or `nil`.
    func chargeStateName() -> String? {
        let quota = quotas.stateNamesPerUID
        if !isExempt, stateNames >= quota { return "uid \(uid) already set the state of the maximum of \(quota) names (quota state-names-per-uid)" }
        stateNames += 1
        return nil
    }

    /// Whether the user can retain a notification charged `cost` bytes (``StateStore/retainedCost(name:payloadBytes:)``)
    /// in place of one of its own charged `replaced`. One that does not grow the charge always can, even over the
    /// quota (lowered by a reload, or charged anew after a hand-over): its values can still change.
    ///
    /// - Returns: why the notification cannot be retained, or `nil`.
    func checkRetained(_ cost: Int, replacing replaced: Int) -> String? {
        let quota = quotas.retainedBytesPerUID
        guard !isExempt, cost > replaced, retainedBytes - replaced + cost > quota else { return nil }
        return "retaining this notification (\(cost) bytes: its payload, its name and \(StateStore.retainedEntryCost) per "
            + "name) would exceed uid \(uid)'s quota of \(quota) retained bytes, \(retainedBytes - replaced) in use "
            + "(quota retained-bytes-per-uid)"
    }

    func chargeRetained(_ delta: Int) { retainedBytes += delta }
}

/// The accounts of every user that has connected, and the quotas they are held to.
final class UserAccounts {
    /// The per-user quotas in force.
    var quotas: AccessConfiguration.Quotas {
        didSet { for account in accounts.values { account.quotas = quotas } }
    }
    private var accounts: [UInt32: UserAccount] = [:]

    /// Every user that has connected.
    var all: Dictionary<UInt32, UserAccount>.Values { accounts.values }

    init(quotas: AccessConfiguration.Quotas) { self.quotas = quotas }

    func account(for uid: UInt32) -> UserAccount {
        if let account = accounts[uid] { return account }
        let account = UserAccount(uid: uid, quotas: quotas)
        accounts[uid] = account
        return account
    }
}

/// The bytes one delivery queue has charged to its user's account: kept in step with what the queue holds.
struct OutboundCharge {
    let account: UserAccount
    private(set) var bytes = 0

    init(account: UserAccount) { self.account = account }

    /// Makes the charge `now` bytes.
    mutating func set(_ now: Int) {
        account.outboundBytes += now - bytes
        bytes = now
    }

    /// Gives the whole charge back (the queue is gone).
    mutating func release() { set(0) }
}
