/// What one user's connections use together, checked against ``AccessConfiguration/Quotas``.
final class UIDAccount {
    let uid: UInt32
    var connections = 0
    var subscriptions = 0
    /// Labels of this user's patterns in the pattern trie (see ``PatternTrie/cost(of:)``).
    var patternLabels = 0
    /// Bytes queued or held for all of this user's connections.
    var outboundBytes = 0
    var retainedBytes = 0
    var stateNames = 0

    init(uid: UInt32) { self.uid = uid }

    /// Root is not subject to quotas.
    var isExempt: Bool { uid == 0 }
}
