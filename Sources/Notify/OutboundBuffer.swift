import NIOCore
import NotifyWire

/// The frames waiting for the I/O thread to write them, appended by any thread under the center's lock, and
/// whether a flush is already on its way to pick them up.
///
/// Frames appended by any thread are written in append order, batched into one write per I/O-thread turn (see
/// `CenterCore.flushOutgoing()`).
struct OutboundBuffer: Sendable {
    private(set) var bytes = ByteBuffer()
    /// Set from the first append until a flush round finds nothing: appenders then know their frames will be
    /// picked up without scheduling another flush.
    private var flushScheduled = false
    private var nextUnacknowledgedPostID: UInt32 = 0

    /// Appends `frame`; returns `true` when the caller must schedule a flush (none was pending).
    mutating func append(_ frame: ClientFrame) -> Bool {
        frame.encode(into: &bytes)
        return claimFlush()
    }

    /// Appends a `POST` nobody waits on, encoded straight from the caller's bytes; returns as ``append(_:)``.
    /// (No flags is `PostFlags(rawValue: 0)`, not `[]`: the array literal went through the standard library's
    /// generic `SetAlgebra` code, unspecialised, on every post.)
    mutating func appendPost(name: String, payload: UnsafeRawBufferPointer, retain: Bool) -> Bool {
        ClientFrame.Post.encode(
            requestID: makeUnacknowledgedPostID(), flags: retain ? .retain : PostFlags(rawValue: 0), name: name, payload: payload,
            into: &bytes)
        return claimFlush()
    }

    /// Appends a post held while disconnected (sent without acknowledgement, as it was made).
    mutating func appendHeldPost(_ post: HeldPosts.Post) {
        appendUnacknowledgedPost(name: post.name, payload: post.payload, retain: post.retain, origin: post.origin)
    }

    /// Appends a post nobody waits on from a `ByteBuffer`, with its flags and, for a relay, its origin.
    @discardableResult
    mutating func appendUnacknowledgedPost(name: String, payload: ByteBuffer, retain: Bool, origin: RelayOrigin?) -> Bool {
        let post = ClientFrame.Post(
            requestID: makeUnacknowledgedPostID(), flags: retain ? .retain : PostFlags(rawValue: 0), name: name,
            payload: payload, origin: origin)
        ClientFrame.post(post).encode(into: &bytes)
        return claimFlush()
    }

    /// Starts a new connection's frames: drops whatever was left and marks a flush as scheduled, since the
    /// caller writes the handshake itself.
    mutating func startConnection() {
        bytes.clear()
        flushScheduled = true
    }

    /// The connection ended: nothing more is written.
    mutating func discard() {
        bytes.clear()
        flushScheduled = false
    }

    /// Swaps `fresh` in for the appended bytes and returns `true`, or, with nothing appended (or `canWrite`
    /// false), ends the scheduled flush and returns `false`.
    mutating func take(swappingIn fresh: inout ByteBuffer, canWrite: Bool) -> Bool {
        guard canWrite, bytes.readableBytes > 0 else {
            flushScheduled = false
            return false
        }
        swap(&fresh, &bytes)
        return true
    }

    private mutating func claimFlush() -> Bool {
        if flushScheduled { return false }
        flushScheduled = true
        return true
    }

    /// Unacknowledged posts use ids with the top bit set, so an `ERROR` for one is told apart from an
    /// acknowledged request's without remembering every post.
    private mutating func makeUnacknowledgedPostID() -> UInt32 {
        nextUnacknowledgedPostID = (nextUnacknowledgedPostID &+ 1) & 0x7FFF_FFFF
        return 0x8000_0000 | nextUnacknowledgedPostID
    }
}
