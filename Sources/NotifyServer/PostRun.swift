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
///
/// A run that ends leaves its route (name, recipients, encoded fields) with its poster as a ``ParkedRoute``.
/// The poster's next post to the same name, in a later read and whatever others posted in between, resumes
/// it instead of being decoded and routed again: a client that posts one notification at a time (a ping, a
/// change event) costs the daemon what a post inside a burst does. The router's routing generation, bumped by
/// every change that could change a route, tells whether a parked route still holds.
struct PostRun {
    /// A finished run's route, kept by its poster for its next post to the same name.
    struct ParkedRoute {
        var name: String
        var sharedFields: [UInt8]
        var recipients: [ClientConnection]
        /// The router's routing generation when the route was worked out.
        var generation: UInt64
    }

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
    /// Each recipient once; empty when nobody may see the name (posts then only take a sequence number).
    var recipients: [ClientConnection] = []
    var frames: [Frame] = []
    /// The router's routing generation when the recipients were worked out (a change during the run outdates
    /// the route it parks).
    private var generation: UInt64 = 0
    /// The run's frames back to back. Reused from run to run: recipients copy it, so its storage stays unique.
    var encoded: ByteBuffer
    /// The `NOTIFICATION` fields that are the same for every post of the run, as encoded: sender pid, uid and
    /// gid, then the name with its length. Reused from run to run.
    private var sharedFields: [UInt8] = []

    init(allocator: ByteBufferAllocator) {
        encoded = allocator.buffer(capacity: Self.byteLimit + 1024)
        sharedFields.reserveCapacity(256)
    }

    var isOpen: Bool { poster != nil }

    /// Opens a run of posts by `poster` to `name`; the caller fills in ``recipients``.
    ///
    /// Takes the storage of the poster's parked route, if it has one (it is for another name or outdated).
    mutating func open(poster: ClientConnection, name: String, generation: UInt64) {
        if let parked = poster.parkedRoute.take() {
            sharedFields = parked.sharedFields
            recipients = parked.recipients
            recipients.removeAll(keepingCapacity: true)
        }
        self.poster = poster
        self.name = name
        self.generation = generation
        let sender = poster.credentials
        sharedFields.removeAll(keepingCapacity: true)
        for value in [sender.pid, sender.uid, sender.gid] {
            withUnsafeBytes(of: value.bigEndian) { sharedFields.append(contentsOf: $0) }
        }
        let nameBytes = name.utf8.count
        withUnsafeBytes(of: UInt16(nameBytes).bigEndian) { sharedFields.append(contentsOf: $0) }
        sharedFields.append(contentsOf: name.utf8)
    }

    /// Closes the run (its frames must have been handed out) and parks its route with its poster, unless the
    /// routing changed during the run (`currentGeneration` is newer): such a route is dropped, since it may
    /// list a connection closed meanwhile.
    ///
    /// - Returns: the poster if its route was parked.
    mutating func close(currentGeneration: UInt64) -> ClientConnection? {
        guard let poster else { return nil }
        self.poster = nil
        guard generation == currentGeneration else {
            recipients.removeAll(keepingCapacity: true)
            return nil
        }
        // The arrays move to the poster; the next run of another poster takes its own poster's storage, or
        // allocates once for a poster's first run.
        poster.parkedRoute = ParkedRoute(
            name: name, sharedFields: sharedFields, recipients: recipients, generation: generation)
        sharedFields = []
        recipients = []
        return poster
    }

    /// Reopens `poster`'s parked route as this (closed) run, if it is still current.
    ///
    /// - Returns: `false` when the poster has no parked route or the routing changed since (the route is
    ///   left parked: the next ``open(poster:name:generation:)`` reuses its storage).
    mutating func resume(_ poster: ClientConnection, generation: UInt64) -> Bool {
        guard poster.parkedRoute?.generation == generation, let parked = poster.parkedRoute.take() else { return false }
        self.poster = poster
        self.generation = generation
        name = parked.name
        sharedFields = parked.sharedFields
        recipients = parked.recipients
        return true
    }

    /// The payload of a `POST` whose fields (after the type byte) are `fields`, if it is a plain post
    /// (flags 0) to this run's name with a payload of at most `maxPayload` bytes; `nil` otherwise (the caller
    /// then decodes it in full, which also reports any error precisely).
    ///
    /// `mutating` although it changes nothing: called on the router's stored run, a non-mutating method got a
    /// copy of the whole run (a retain and release of each of its references, per post: half the daemon's time
    /// at one subscriber); a mutating one works on it in place.
    mutating func continuingPayload(_ fields: UnsafeRawBufferPointer, maxPayload: Int) -> UnsafeRawBufferPointer? {
        // request_id u32, flags u8, name (u16 + bytes), payload (u32 + bytes)
        let nameStart = 4 + 1 + 2
        guard fields.count >= nameStart, fields[4] == 0 else { return nil }
        let nameLength = Int(fields[5]) << 8 | Int(fields[6])
        let payloadStart = nameStart + nameLength + 4
        guard fields.count >= payloadStart else { return nil }
        let payloadLength = fields.count - payloadStart
        let declared = fields.loadUnaligned(fromByteOffset: payloadStart - 4, as: UInt32.self).bigEndian
        guard UInt64(declared) == UInt64(payloadLength), payloadLength <= maxPayload else { return nil }
        let sameName = sharedFields.withUnsafeBytes { shared in
            // sharedFields: 12 bytes of credentials, then the name's length and bytes as in the post.
            UnsafeRawBufferPointer(rebasing: shared[12...])
                .bytesEqual(UnsafeRawBufferPointer(rebasing: fields[(nameStart - 2)..<(nameStart + nameLength)]))
        }
        guard sameName else { return nil }
        return UnsafeRawBufferPointer(rebasing: fields[payloadStart...])
    }

    /// Encodes one post's `NOTIFICATION` (the same bytes as ``NotificationFrame/encode(sequence:sender:name:payload:into:)``)
    /// in one reservation, and hands the run out when it is full.
    mutating func append(sequence: UInt64, payload: UnsafeRawBufferPointer) {
        let offset = encoded.writerIndex
        let bodyLength = 1 + 8 + sharedFields.count + 4 + payload.count
        let total = ProtocolConstants.lengthPrefixSize + bodyLength
        sharedFields.withUnsafeBytes { shared in
            _ = encoded.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { out in
                out.storeBytes(of: UInt32(bodyLength).bigEndian, toByteOffset: 0, as: UInt32.self)
                out[4] = MessageType.notification.rawValue
                out.storeBytes(of: sequence.bigEndian, toByteOffset: 5, as: UInt64.self)
                var position = 13
                UnsafeMutableRawBufferPointer(rebasing: out[position..<(position + shared.count)]).copyMemory(from: shared)
                position += shared.count
                out.storeBytes(of: UInt32(payload.count).bigEndian, toByteOffset: position, as: UInt32.self)
                position += 4
                if payload.count > 0 {
                    UnsafeMutableRawBufferPointer(rebasing: out[position..<(position + payload.count)]).copyMemory(from: payload)
                }
                return total
            }
        }
        frames.append(Frame(offset: offset, length: total, sequence: sequence))
    }

    /// The run's frames from the `first`th on, copied into storage of their own: a slow connection holds them
    /// (one allocation per run rather than one per post) without keeping the reused run buffer, which it would
    /// copy on its next write.
    func ownedFrames(from first: Int) -> ByteBuffer {
        guard first < frames.count, let last = frames.last else { return ByteBuffer() }
        let start = frames[first].offset
        let length = last.offset + last.length - start
        var copy = ByteBufferAllocator().buffer(capacity: length)
        copy.writeImmutableBuffer(encoded.getSlice(at: start, length: length)!)
        return copy
    }

    /// The bytes of one frame of the run.
    func slice(_ frame: Frame) -> ByteBuffer {
        encoded.getSlice(at: frame.offset, length: frame.length)!
    }
}
