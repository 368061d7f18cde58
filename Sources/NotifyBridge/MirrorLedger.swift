/// What the bridge knows about each key it mirrors (a state value, a retained notification), so that every host
/// converges on the bucket's last value without local observers seeing a value go back and forth.
///
/// The bucket orders every put (its revision). A host applies an entry from the bucket only when it is newer than
/// the host's own last put of that key; while one of its puts is unacknowledged it cannot tell, so it keeps the
/// newest entry that arrived meanwhile and decides when the acknowledgement names the put's revision.
package struct MirrorLedger<Value: Sendable>: Sendable {
    private struct KeyState {
        var putsInFlight = 0
        /// The revision of this host's last acknowledged put.
        var lastPut: UInt64 = 0
        /// The newest entry that arrived while a put was in flight.
        var waiting: (revision: UInt64, value: Value)?
    }

    private var keys: [String: KeyState] = [:]

    package init() {}

    /// Forgets every revision (the bucket was replaced: its revisions start over), keeping the puts still in
    /// flight: each one's revision, when it comes, still decides against the entries that arrived meanwhile.
    package mutating func forgetRevisions() {
        keys = keys.filter { $0.value.putsInFlight > 0 }.mapValues { state in
            var state = state
            state.lastPut = 0
            state.waiting = nil
            return state
        }
    }

    /// This host is about to put `key`.
    package mutating func willPut(_ key: String) {
        keys[key, default: KeyState()].putsInFlight += 1
    }

    /// A put finished: acknowledged at `revision`, or failed (nil).
    ///
    /// - Returns: a value to apply locally: an entry that arrived meanwhile and is newer than this host's put.
    package mutating func didPut(_ key: String, revision: UInt64?) -> Value? {
        guard var state = keys[key] else { return nil }
        state.putsInFlight -= 1
        if let revision { state.lastPut = max(state.lastPut, revision) }
        var apply: Value?
        if state.putsInFlight == 0, let waiting = state.waiting {
            state.waiting = nil
            if waiting.revision > state.lastPut { apply = waiting.value }
        }
        keys[key] = state
        return apply
    }

    /// An entry arrived from the bucket (another host's put, or this host's own coming back).
    ///
    /// - Returns: whether to apply it locally now.
    package mutating func received(_ key: String, revision: UInt64, value: Value) -> Bool {
        guard var state = keys[key] else { return true }
        defer { keys[key] = state }
        if state.putsInFlight > 0 {
            if revision > (state.waiting?.revision ?? 0) { state.waiting = (revision, value) }
            return false
        }
        return revision > state.lastPut
    }
}
