/// The bookkeeping of a key-value watch's ordered consumer, apart from any I/O: which consumer's messages count,
/// which are duplicates, when a gap means the consumer must be recreated, and when the initial values are done.
///
/// A watch starts with a consumer delivering the last message of every matching key (`last_per_subject`). Each
/// message carries its consumer sequence (1, 2, 3, ... without gaps while nothing is lost) and stream sequence; a
/// gap, or a heartbeat naming a consumer sequence other than the last one seen, means messages were lost, and the
/// consumer is recreated to start after the last stream sequence delivered. Every recreation starts a new
/// generation; messages of older generations are ignored.
struct NATSKeyValueWatchSequencer: Equatable, Sendable {
    /// Where a new consumer starts.
    enum Start: Equatable, Sendable {
        /// The last message of every key: initial values not yet all delivered.
        case lastPerSubject
        /// Everything from this stream sequence on.
        case sequence(UInt64)
    }

    /// What to do with a message.
    enum Outcome: Equatable, Sendable {
        /// Not from the current consumer: drop it.
        case ignore
        /// Messages were lost: drop this one and recreate the consumer (``beginConsumer()``).
        case reset
        /// Deliver it unless `deliver` is false (a duplicate); then, if `initialValuesDone`, the marker.
        case accept(deliver: Bool, initialValuesDone: Bool)
    }

    /// The current consumer's generation.
    private(set) var generation: UInt64 = 0
    /// The last stream sequence delivered.
    private(set) var lastStreamSequence: UInt64 = 0
    /// The last consumer sequence of the current consumer (0: none yet).
    private(set) var lastConsumerSequence: UInt64 = 0
    /// Whether the initial-values marker was delivered.
    private(set) var initialValuesDone = false

    /// A new consumer (the first or a recreation): its generation and where it starts.
    mutating func beginConsumer() -> (generation: UInt64, start: Start) {
        generation += 1
        lastConsumerSequence = 0
        // Before the initial values are all in, last-per-subject again: a key already delivered comes again with
        // the same or an older sequence (dropped as a duplicate) or a newer one (delivered).
        return (generation, initialValuesDone ? .sequence(lastStreamSequence + 1) : .lastPerSubject)
    }

    /// A message of consumer `generation` with its sequences and what the consumer still has pending after it.
    mutating func message(generation: UInt64, consumerSequence: UInt64, streamSequence: UInt64, pending: UInt64)
        -> Outcome
    {
        guard generation == self.generation else { return .ignore }
        guard consumerSequence == lastConsumerSequence + 1 else { return .reset }
        lastConsumerSequence = consumerSequence
        let deliver = streamSequence > lastStreamSequence
        if deliver { lastStreamSequence = streamSequence }
        let done = !initialValuesDone && pending == 0
        if done { initialValuesDone = true }
        return .accept(deliver: deliver, initialValuesDone: done)
    }

    /// An idle heartbeat of consumer `generation`, naming the last consumer sequence it sent
    /// (`Nats-Last-Consumer`): `.reset` if that is not the last one seen.
    func heartbeat(generation: UInt64, lastConsumerSequence: UInt64?) -> Outcome {
        guard generation == self.generation else { return .ignore }
        guard let lastConsumerSequence, lastConsumerSequence != self.lastConsumerSequence else {
            return .accept(deliver: false, initialValuesDone: false)
        }
        return .reset
    }

    /// The server created consumer `generation`, with `pending` messages to deliver: true when that is the
    /// marker's moment (nothing to deliver and nothing delivered yet).
    mutating func consumerCreated(generation: UInt64, pending: UInt64) -> Bool {
        guard generation == self.generation, !initialValuesDone, pending == 0, lastConsumerSequence == 0 else {
            return false
        }
        initialValuesDone = true
        return true
    }
}

/// What a JetStream push consumer's message says of itself in its reply subject:
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time ns>.<pending>`, or the longer form
/// with a domain and an account hash after `$JS.ACK` (and a random token at the end).
struct NATSJetStreamMetadata: Equatable, Sendable {
    var stream: String
    var consumer: String
    var delivered: UInt64
    var streamSequence: UInt64
    var consumerSequence: UInt64
    /// Nanoseconds since 1970.
    var timestamp: Int64
    var pending: UInt64

    init?(replySubject: String) {
        let tokens = replySubject.split(separator: ".", omittingEmptySubsequences: false)
        guard tokens.count >= 9, tokens[0] == "$JS", tokens[1] == "ACK" else { return nil }
        let first = tokens.count == 9 ? 2 : 4
        guard tokens.count >= first + 7,
            let delivered = UInt64(tokens[first + 2]), let streamSequence = UInt64(tokens[first + 3]),
            let consumerSequence = UInt64(tokens[first + 4]), let timestamp = Int64(tokens[first + 5]),
            let pending = UInt64(tokens[first + 6])
        else { return nil }
        stream = String(tokens[first])
        consumer = String(tokens[first + 1])
        self.delivered = delivered
        self.streamSequence = streamSequence
        self.consumerSequence = consumerSequence
        self.timestamp = timestamp
        self.pending = pending
    }
}
