import NIOCore
import NotifyWire

/// Posts from one connection to one name, one after another within one read, fanned out together.
///
/// Clients post in bursts, and a burst is usually one name. The router works out the run's recipients once
/// (exact table, pattern trie, access rules), encodes each post's `NOTIFICATION` into one shared buffer, and
/// hands each recipient the whole run as one append when the run ends: per post, the daemon only compares the
/// name's bytes and encodes the frame once. The run ends before the poster's next frame of any other kind,
/// at the end of the read, or when the buffer reaches ``byteLimit``, so ordering is what it would be with one
/// fan-out per post.
struct PostRun {
    /// Where one post's `NOTIFICATION` sits in ``encoded``.
    struct Frame {
        var offset: Int
        var length: Int
        var sequence: UInt64
    }

    /// Encoded bytes past which a run is handed to its recipients before it continues; below the connections'
    /// early-flush threshold, so a reading subscriber still gets its bytes during a long burst.
    static let byteLimit = 16 * 1024

    /// The posting connection while a run is open.
    var poster: ClientConnection?
    var name = ""
    var sender = SenderCredentials(pid: 0, uid: 0, gid: 0)
    /// Each recipient once; empty when nobody may see the name (posts then only take a sequence number).
    var recipients: [ClientConnection] = []
    var frames: [Frame] = []
    /// The run's frames back to back. Reused from run to run: recipients copy it, so its storage stays unique.
    var encoded: ByteBuffer

    init(allocator: ByteBufferAllocator) {
        encoded = allocator.buffer(capacity: Self.byteLimit + 1024)
    }

    var isOpen: Bool { poster != nil }

    /// The bytes of one frame of the run.
    func slice(_ frame: Frame) -> ByteBuffer {
        encoded.getSlice(at: frame.offset, length: frame.length)!
    }
}
