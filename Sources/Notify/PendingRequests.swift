import NIOCore
import NotifyWire

/// The daemon's answer to a request a caller waits for: the one type every waiting caller is resumed with.
enum Reply: Sendable {
    /// The kinds of answer, one per frame type that completes a request.
    enum Kind: Sendable {
        case ok, pong, state, posted, queryResult
    }

    case ok
    case pong
    case state(UInt64?)
    case posted(PostReceipt)
    case queryResult(ByteBuffer)

    var kind: Kind {
        switch self {
        case .ok: .ok
        case .pong: .pong
        case .state: .state
        case .posted: .posted
        case .queryResult: .queryResult
        }
    }
}

/// The requests sent on the current connection that the daemon has not answered yet, by request id.
///
/// A value kept under the center's lock; what it hands back is resumed or reported after the lock is released.
struct PendingRequests: Sendable {
    enum Request: Sendable {
        /// A caller waiting for an answer of the given kind.
        case caller(CheckedContinuation<Reply, Error>, expecting: Reply.Kind)
        /// A caller waiting for its `SUSPEND`'s `OK`. Counted in the connection's suspension depth from the moment
        /// it is sent; when it fails (refused, or its connection lost), whoever removes it takes that back under the
        /// lock (``isSuspension``), so a reconnection does not replay a suspension its caller was told had failed.
        case suspension(CheckedContinuation<Reply, Error>)
        case subscribe(pattern: String)
        /// A subscription asking for the current (retained) value for these observations (several when a
        /// (re)connection replays it); `probe` is an extra subscription made only for that purpose, removed once
        /// answered.
        case currentValue([ObservationCore], probe: UInt32?)
        /// A state subscription asking for the current values for these state observations (several when a
        /// reconnection replays it); `probe` as for ``currentValue(_:probe:)``.
        case currentStates([ObservationCore], probe: UInt32?)
        case unsubscribe(pattern: String)
        /// A request the library makes on its own (replaying `suspend` after a reconnection, removing a
        /// current-value probe); `operation` names it in logs and events if the daemon rejects it.
        case housekeeping(operation: String)

        /// Ends the request with the daemon's answer or a failure: the one place a waiting caller is resumed.
        ///
        /// - Returns: `false` when the answer is of another kind than the request expects: a daemon's mistake, which
        ///   fails the caller (nothing is left waiting) and on which the connection must be closed.
        @discardableResult
        func complete(with result: Result<Reply, Error>) -> Bool {
            var result = result
            let expected: Reply.Kind? =
                switch self {
                case .caller(_, let expected): expected
                case .suspension, .currentValue, .currentStates: .ok
                case .subscribe, .unsubscribe, .housekeeping: nil
                }
            var matched = true
            if case .success(let reply) = result, let expected, reply.kind != expected {
                matched = false
                result = .failure(
                    NotifyError.connectionLost(
                        reason: "protocol error from the daemon: \(reply.kind) answered a request expecting \(expected)"))
            }
            switch self {
            case .caller(let continuation, _), .suspension(let continuation):
                continuation.resume(with: result)
            case .currentValue(let cores, _), .currentStates(let cores, _):
                for core in cores { core.finishWaitingForCurrentValue() }
            case .subscribe, .unsubscribe, .housekeeping:
                break
            }
            return matched
        }

        /// Whether this is a `SUSPEND` a caller waits for (see ``suspension(_:)``).
        var isSuspension: Bool {
            if case .suspension = self { true } else { false }
        }
    }

    private var requests: [UInt32: Request] = [:]
    /// The parts received so far of long query answers, by request id (`QUERY_RESULT_PART`).
    private var queryParts: [UInt32: [ByteBuffer]] = [:]
    private var nextRequestID: UInt32 = 1
    /// Subscriptions the daemon refused since the last barrier; the next `synchronize()` reports them.
    var rejectedSubscriptions: [(pattern: String, error: ErrorFrame)] = []

    /// Registers `request` under a fresh id, which its frame must carry.
    mutating func add(_ request: Request) -> UInt32 {
        // Acknowledged requests use ids below 2^31; unacknowledged posts use the upper half, so an ERROR
        // for one of them can be told apart without remembering every post.
        let id = nextRequestID
        nextRequestID = nextRequestID >= 0x7FFF_FFFF ? 1 : nextRequestID + 1
        requests[id] = request
        return id
    }

    subscript(id: UInt32) -> Request? { requests[id] }

    mutating func remove(_ id: UInt32) -> Request? {
        requests.removeValue(forKey: id)
    }

    /// Keeps one part of a long query answer, if the query is still waiting.
    mutating func appendQueryPart(_ json: ByteBuffer, for id: UInt32) {
        if requests[id] != nil { queryParts[id, default: []].append(json) }
    }

    /// Removes the query `id`, with its whole answer: `last` joined to the parts before it, if any.
    mutating func completeQuery(_ id: UInt32, last: ByteBuffer) -> (Request?, Reply) {
        let request = requests.removeValue(forKey: id)
        let parts = queryParts.removeValue(forKey: id) ?? []
        return (request, .queryResult(parts.isEmpty ? last : Self.joinedArrays(parts + [last])))
    }

    /// Removes a `PONG`'s request with its result: the first subscription refused since the previous barrier
    /// fails it.
    mutating func completeBarrier(_ id: UInt32) -> (Request?, Result<Reply, Error>) {
        let request = requests.removeValue(forKey: id)
        guard case .caller(_, .pong) = request else { return (request, .success(.pong)) }
        defer { rejectedSubscriptions.removeAll() }
        guard let first = rejectedSubscriptions.first else { return (request, .success(.pong)) }
        let error = NotifyError.rejected(
            code: first.error.code, message: "subscribing to \(first.pattern): \(first.error.message)")
        return (request, .failure(error))
    }

    /// Removes every request (the connection ended or the center closed), to be failed by the caller.
    mutating func removeAll() -> [Request] {
        let all = Array(requests.values)
        requests.removeAll()
        queryParts.removeAll()
        return all
    }

    /// One JSON array holding the elements of `arrays` in order (each a JSON array as the daemon writes it).
    static func joinedArrays(_ arrays: [ByteBuffer]) -> ByteBuffer {
        var joined = ByteBuffer()
        joined.reserveCapacity(arrays.reduce(0) { $0 + $1.readableBytes })
        joined.writeStaticString("[")
        var first = true
        for array in arrays {
            // Between the brackets, if anything.
            guard array.readableBytes > 2, let inner = array.getSlice(at: array.readerIndex + 1, length: array.readableBytes - 2)
            else { continue }
            if !first { joined.writeStaticString(",") }
            joined.writeImmutableBuffer(inner)
            first = false
        }
        joined.writeStaticString("]")
        return joined
    }
}
