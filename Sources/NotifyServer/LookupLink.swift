/// What a background lookup (a peer's groups, its command name) holds of the connection it answers: the
/// connection's handler until the connection closes, then nothing. A lookup that hangs keeps this small object
/// alive, not a closed connection's peer and queues.
///
/// Not a `weak` reference to the handler or the peer: an object that was ever referenced weakly gets a side table
/// for life, and every retain and release of it takes the runtime's slow path after that; a peer is retained for
/// every delivery to it (BENCHMARKS.md F35).
final class LookupLink {
    /// The connection the lookup answers, until ``cut()``.
    private(set) var handler: PeerChannelHandler?

    init(_ handler: PeerChannelHandler) {
        self.handler = handler
    }

    /// The connection closed: what the lookup finds goes nowhere, and the handler is no longer kept.
    func cut() {
        handler = nil
    }
}
