import NIOCore
import NotifyWire

extension Peer {
    /// What serving one frame cost, for the handler's per-turn budget.
    enum ServedFrame {
        /// A post that continued the peer's run of posts to one name: a sequence number and a copy of its bytes.
        case runPost
        /// A plain post to a name with one exact subscriber, served from its bytes straight into that subscriber's
        /// queue (checked and routed, not decoded; no pattern matched), and the pattern-trie nodes that check visited.
        case postAlone(patternVisits: Int)
        /// A plain post to a name with exact subscribers that started a run from its bytes (checked and routed, not
        /// decoded), and the pattern-trie nodes its match visited.
        case runStartFromBytes(patternVisits: Int)
        /// A post that started a run (decoded, checked and routed), and the pattern-trie nodes its match visited.
        case runStart(patternVisits: Int)
        /// Any other request, and the pattern-trie nodes or stored names it visited.
        case request(patternVisits: Int)
    }

    /// Serves one frame from its bytes, where they lie in the handler's accumulator, if it is a post that needs no
    /// decoding: one that continues this peer's run of posts to one name (the first post of the run passed every
    /// check; see ``PostRun``), or a plain post to a name with exact subscribers, which goes to its one subscriber
    /// alone or starts a run (``Broker/postFromBytes(_:by:nameHash:)``). The handler talks to its peer only, the
    /// peer to the broker.
    ///
    /// - Parameter nameHash: the hash of the post's name, if the handler had it computed ahead.
    /// - Returns: what serving it cost, or `nil` (nothing done) when the frame needs ``serve(type:body:)``.
    @inline(__always)
    func serveInPlace(type: UInt8, fields: UnsafeRawBufferPointer, maxPayload: Int, nameHash: Int?) -> ServedFrame? {
        // Read once, checked once: only a plain post within the payload limit is served from its bytes (the full
        // decoder judges the rest, and reports any error precisely).
        guard type == MessageType.post.rawValue, let post = ClientFrame.PostFields(fields: fields), post.flags == 0,
            post.payload.count <= maxPayload
        else { return nil }
        if broker.appendToRun(post, ifContinuedBy: self) { return .runPost }
        guard isOpen else { return nil }
        let visitsBefore = broker.matchingWork
        switch broker.postFromBytes(post, by: self, nameHash: nameHash) {
        case nil: return nil
        case .alone: return .postAlone(patternVisits: broker.matchingWork &- visitsBefore)
        case .run: return .runStartFromBytes(patternVisits: broker.matchingWork &- visitsBefore)
        }
    }

    /// Decodes and serves one frame the handler took from its accumulator (any frame ``serveInPlace(type:fields:maxPayload:nameHash:)``
    /// did not take).
    func serve(type: UInt8, body: inout ByteBuffer) throws(WireDecodingError) -> ServedFrame {
        // A SET_STATE walks the state watchers' trie: it counts like a post's walk; a SUBSCRIBE that asks for the
        // current values of a pattern scans every state or retained name: each entry counts as a visit.
        let visitsBefore = broker.matchingWork
        broker.endRun()
        handle(try ClientFrame.decode(type: type, body: &body))
        let visits = broker.matchingWork &- visitsBefore
        return type == MessageType.post.rawValue ? .runStart(patternVisits: visits) : .request(patternVisits: visits)
    }

    /// The frames at hand are served (the turn's budget is spent, or none is left, or one was malformed): the
    /// open run is delivered.
    func endServing() {
        broker.endRun()
    }
}
