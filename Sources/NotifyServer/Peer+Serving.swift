import NIOCore
import NotifyWire

extension Peer {
    /// What serving one frame cost, for the handler's per-turn budget.
    enum ServedFrame {
        /// A post that continued the peer's run of posts to one name: a sequence number and a copy of its bytes.
        case runPost
        /// A plain post to a name with exact subscribers that started a run from its bytes (checked and routed, not
        /// decoded), and the pattern-trie nodes its match visited.
        case runStartFromBytes(patternVisits: Int)
        /// A post that started a run (decoded, checked and routed), and the pattern-trie nodes its match visited.
        case runStart(patternVisits: Int)
        /// Any other request, and the pattern-trie nodes or stored names it visited.
        case request(patternVisits: Int)
    }

    /// Serves one frame the handler took from its accumulator: the handler talks to its peer only, the peer to
    /// the broker. A post that continues this peer's run of posts to one name needs no decoding or checks beyond
    /// its size: the first post of the run passed them all (see ``PostRun``); a plain post to a name with exact
    /// subscribers starts a run without being decoded (``Broker/startRun(ifPlainPostBy:body:maxPayload:)``).
    @inline(__always)
    ///
    /// - Parameter nameHash: the hash of the post's name, if the handler had it computed ahead.
    func serve(type: UInt8, body: inout ByteBuffer, maxPayload: Int, nameHash: Int? = nil) throws(WireDecodingError) -> ServedFrame {
        let isPost = type == MessageType.post.rawValue
        if isPost, broker.appendToRun(ifContinuedBy: self, body: body, maxPayload: maxPayload) { return .runPost }
        // A SET_STATE walks the state watchers' trie: it counts like a post's walk; a SUBSCRIBE that asks for the
        // current values of a pattern scans every state or retained name: each entry counts as a visit.
        let visitsBefore = broker.matchingWork
        if isPost, isOpen, broker.startRun(ifPlainPostBy: self, body: body, maxPayload: maxPayload, nameHash: nameHash) {
            return .runStartFromBytes(patternVisits: broker.matchingWork &- visitsBefore)
        }
        broker.endRun()
        handle(try ClientFrame.decode(type: type, body: &body))
        let visits = broker.matchingWork &- visitsBefore
        return isPost ? .runStart(patternVisits: visits) : .request(patternVisits: visits)
    }

    /// The frames at hand are served (the turn's budget is spent, or none is left, or one was malformed): the
    /// open run is delivered.
    func endServing() {
        broker.endRun()
    }
}
