import NIOCore
import NotifyWire

// Marked retained posts (SUBSCRIBE with the marks-retained flag, PROTOCOL.md § 6.2, § 9.5): a post made with
// retain reaches a peer whose matching subscriptions include a marking one as RETAINED with request id 0, instead
// of a NOTIFICATION. Only posts made with retain come here; runs of posts and other posts never look at the marks.

/// A post made with retain, as `RETAINED(0)`: encoded at most once without its origin and once with it, when a
/// marking recipient first needs that encoding.
struct MarkedRetainedPost {
    /// The post's fields, origin included (if it was relayed).
    let notification: NotificationFrame
    private var plain: ByteBuffer?
    private var withOrigin: ByteBuffer?

    init(notification: NotificationFrame) {
        self.notification = notification
    }

    /// The frame, with the origin field for a peer that asked for origins.
    mutating func frame(withOrigin: Bool) -> ByteBuffer {
        if withOrigin, let withOrigin = self.withOrigin { return withOrigin }
        if !withOrigin, let plain { return plain }
        var fields = notification
        if !withOrigin { fields.origin = nil }
        var encoded = ByteBufferAllocator().buffer(
            capacity: 4 + NotificationFrame.encodedLength(
                nameByteCount: fields.name.utf8.count, payloadByteCount: fields.payload.readableBytes)
                + (fields.origin?.encodedLength ?? 0))
        ServerFrame.retained(requestID: ProtocolConstants.noRequest, fields).encode(into: &encoded)
        if withOrigin { self.withOrigin = encoded } else { plain = encoded }
        return encoded
    }
}

extension Broker {
    /// Queues the marked retained post for `peer`: never held, merged or dropped, like a `STATE_CHANGED` (a peer
    /// that cannot take it within its bound or its user's outbound quota is closed as a slow consumer).
    ///
    /// - Returns: whether it was queued.
    func queueMarkedRetained(_ post: inout MarkedRetainedPost, withOrigin: Bool, to peer: Peer) -> Bool {
        guard peer.isOpen else { return false }
        let name = post.notification.name
        return queueUnheld(post.frame(withOrigin: withOrigin), for: peer) {
            $0.disconnectSlowRetainedMarker(name: name)
        }
    }
}
