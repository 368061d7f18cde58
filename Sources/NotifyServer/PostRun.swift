import NIOCore
import NotifyWire

/// One recipient of a post or run: a peer once, under the strongest of its matching subscriptions.
typealias Recipient = Subscriber

/// Posts from one peer to one name, one after another within one read, fanned out together.
///
/// Clients post in bursts, and a burst is usually one name. The broker works out the run's recipients once
/// (exact table, pattern trie, access rules), encodes each post's `NOTIFICATION` into one shared buffer, and
/// hands each recipient the whole run as one append when the run ends: per post, the daemon only compares the
/// name's bytes and encodes the frame once. The run ends before the poster's next frame of any other kind,
/// at the end of the read, or when the buffer reaches ``byteLimit``, so ordering is what it would be with one
/// fan-out per post.
///
/// A run that ends leaves its route (name, recipients, encoder) with the broker as a ``ParkedRoute`` for its
/// poster. The poster's next post to the same name, in a later read and whatever others posted in between,
/// resumes it instead of being decoded and routed again: a client that posts one notification at a time costs
/// the daemon what a post inside a burst does. The index's routing generation, bumped by every change that
/// could change a route, tells whether a parked route still holds.
struct PostRun {
    /// A finished run's route, kept for its poster's next post to the same name.
    struct ParkedRoute {
        var name: String
        var encoder: NotificationFrame.RunEncoder
        var recipients: [Recipient]
        /// The routing generation when the route was worked out.
        var generation: UInt64
    }

    /// Where one post's `NOTIFICATION` sits in ``encoded``.
    struct Frame {
        var offset: Int
        var length: Int
        var sequence: UInt64
    }

    /// Encoded bytes past which a run is handed to its recipients before it continues; below the peers'
    /// early-flush threshold, so a reading subscriber still gets its bytes during a long burst.
    static let byteLimit = 16 * 1024

    /// Encoded bytes from which a run with several recipients is copied once for them to share, rather than once
    /// for each.
    static let sharingThreshold = 4096

    /// The posting peer while a run is open.
    private(set) var poster: Peer?
    private(set) var name = ""
    /// Each recipient once; empty when nobody may see the name (posts then only take a sequence number).
    var recipients: [Recipient] = []
    private(set) var frames: [Frame] = []
    /// The routing generation when the recipients were worked out (a change during the run outdates the route
    /// it parks).
    private var generation: UInt64 = 0
    /// The run's frames back to back. Reused from run to run while recipients copy it; a run they share leaves
    /// its storage to them, and the next one starts in new storage (``clearFrames()``).
    private(set) var encoded: ByteBuffer
    private var encoder = NotificationFrame.RunEncoder()

    private let allocator: ByteBufferAllocator

    init(allocator: ByteBufferAllocator) {
        self.allocator = allocator
        encoded = allocator.buffer(capacity: Self.byteLimit + 1024)
    }

    var isOpen: Bool { poster != nil }

    /// Opens a run of posts by `poster` to `name`; the caller fills in ``recipients``.
    ///
    /// - Parameter storage: the poster's parked route, if it has one (for another name, or outdated): its
    ///   arrays are reused.
    mutating func open(poster: Peer, name: String, generation: UInt64, reusing storage: consuming ParkedRoute?) {
        // Moved out, not copied: with the route still holding them, emptying and refilling the arrays below would
        // copy them to new storage, and freeing the route's would make two allocations and two frees per run.
        if var storage = storage.take() {
            swap(&encoder, &storage.encoder)
            swap(&recipients, &storage.recipients)
            recipients.removeAll(keepingCapacity: true)
        }
        self.poster = poster
        self.name = name
        self.generation = generation
        encoder.start(sender: poster.credentials, name: name)
    }

    /// Closes the run (its frames must have been handed out) and returns its route for the poster to park,
    /// unless the routing changed during the run (`currentGeneration` is newer): such a route is dropped, since
    /// it may list a peer closed meanwhile.
    mutating func close(currentGeneration: UInt64) -> (poster: Peer, route: ParkedRoute)? {
        guard let poster else { return nil }
        self.poster = nil
        guard generation == currentGeneration else {
            recipients.removeAll(keepingCapacity: true)
            return nil
        }
        // The arrays move to the parked route; the next run of another poster takes its own poster's storage,
        // or allocates once for a poster's first run.
        let route = ParkedRoute(name: name, encoder: encoder, recipients: recipients, generation: generation)
        encoder = NotificationFrame.RunEncoder()
        recipients = []
        return (poster, route)
    }

    /// Reopens `poster`'s parked `route` as this (closed) run.
    mutating func resume(_ poster: Peer, _ route: ParkedRoute) {
        self.poster = poster
        generation = route.generation
        name = route.name
        encoder = route.encoder
        recipients = route.recipients
    }

    /// Whether `post` (a plain post, read in place) is to this run's name.
    ///
    /// `mutating` although it changes nothing: called on the broker's stored run, a non-mutating method got a
    /// copy of the whole run (a retain and release of each of its references, per post); a mutating one works
    /// on it in place.
    @inline(__always)
    mutating func isContinued(by post: ClientFrame.PostFields) -> Bool {
        encoder.hasName(post.nameField)
    }

    /// Encodes one post's `NOTIFICATION` at the end of the run.
    @inline(__always)
    mutating func append(sequence: UInt64, payload: UnsafeRawBufferPointer) {
        let offset = encoded.writerIndex
        let length = encoder.encode(sequence: sequence, payload: payload, into: &encoded)
        frames.append(Frame(offset: offset, length: length, sequence: sequence))
    }

    /// Forgets the frames handed out (the run goes on).
    mutating func clearFrames() {
        frames.removeAll(keepingCapacity: true)
        if encoded.modifyIfUniquelyOwned({ $0.clear() }) == nil {
            // Recipients share the storage until they have written it (``sharedBytes(recipientCount:)``).
            encoded = allocator.buffer(capacity: Self.byteLimit + 1024)
        }
    }

    /// The run's frames for its recipients to queue as they are, without copying them, when that costs less than
    /// a copy for each: the run's own storage when the run fills at least half of it (its next frames then go to
    /// new storage), or one copy of the run, sized to it, when it has several recipients and is large. Never more
    /// than twice the bytes it holds, so the storage a slow recipient keeps stays within twice what it is charged.
    ///
    /// - Returns: `nil` when each recipient had better copy the run (``encoded``) into its own batch.
    func sharedBytes(recipientCount: Int) -> ByteBuffer? {
        let size = encoded.readableBytes
        if size * 2 >= encoded.capacity { return encoded }
        guard recipientCount >= 2, size >= Self.sharingThreshold else { return nil }
        var copy = allocator.buffer(capacity: size)
        copy.writeImmutableBuffer(encoded)
        return copy
    }

    /// The bytes of the run's frames from the `first`th on (a view of the run's buffer, which is reused: a slow peer
    /// holding them copies them, ``HeldNotifications/holdRun(_:count:firstSequence:limit:subscriptionID:)``).
    func slice(from first: Int) -> ByteBuffer {
        guard first < frames.count, let last = frames.last else { return ByteBuffer() }
        let start = frames[first].offset
        return encoded.getSlice(at: start, length: last.offset + last.length - start)!
    }

    /// The bytes of one frame of the run.
    func slice(_ frame: Frame) -> ByteBuffer {
        encoded.getSlice(at: frame.offset, length: frame.length)!
    }

    /// The bytes of the run's frames up to and including the `last`th.
    func slice(through last: Int) -> ByteBuffer {
        let start = frames[0].offset
        return encoded.getSlice(at: start, length: frames[last].offset + frames[last].length - start)!
    }
}
