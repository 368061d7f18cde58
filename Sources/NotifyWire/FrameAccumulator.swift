import NIOCore

/// Collects the bytes of a stream and cuts them into frames.
///
/// Both the daemon and the client library feed every read into an accumulator and drain whole frames from
/// it, so framing happens in one place and needs no extra channel handler. The methods are inlinable so that
/// each user gets a copy specialized for its frame type: an unspecialized generic copy looks up type metadata
/// on every frame.
package struct FrameAccumulator<Frame: WireFrameDecodable> {
    /// The bytes frames are cut from. `nil` when nothing is buffered; then ``spill`` is `nil` too.
    @usableFromInline var buffer: ByteBuffer?
    /// The rest of a read whose first bytes completed the partial frame `buffer` held (see ``append(_:)``): taken
    /// as `buffer` once that is used up.
    @usableFromInline var spill: ByteBuffer?
    /// Bytes copied by ``append(_:)`` so far (tests check that a read costs at most one frame's copy).
    package private(set) var copiedBytes = 0
    /// The capacity of the buffer and of the spill (a slice's own, not that of the read it is cut from): tests check
    /// that a partial frame does not keep a copy of a whole read.
    package var heldCapacity: Int { (buffer?.capacity ?? 0) + (spill?.capacity ?? 0) }
    /// Whether the rest of a read waits behind the frame it completed (tests check that they reach this path).
    package var holdsSpill: Bool { spill != nil }
    /// Frames longer than this (after the length prefix) are rejected with ``WireDecodingError/frameTooLarge(length:limit:)``.
    package var maxFrameLength: UInt32

    /// Creates an empty accumulator.
    @inlinable
    package init(maxFrameLength: UInt32) {
        self.maxFrameLength = maxFrameLength
    }

    /// Bytes received but not yet returned as part of a frame.
    @inlinable
    package var bufferedBytes: Int { (buffer?.readableBytes ?? 0) + (spill?.readableBytes ?? 0) }

    /// The bytes received and not yet returned as frames (a hand-over carries them to the next daemon).
    package var bufferedContents: [UInt8] {
        (buffer.map { Array($0.readableBytesView) } ?? []) + (spill.map { Array($0.readableBytesView) } ?? [])
    }

    /// Adds bytes read from the stream.
    ///
    /// A read usually arrives when every whole frame before it was taken, and what is left is the start of one
    /// frame: then only that frame is completed, in a buffer of its own, and the rest of the read is kept where NIO
    /// read it. Appending the whole read instead copied every byte of a stream of large frames once more, and again
    /// when the growing buffer was reallocated and compacted.
    @inlinable
    package mutating func append(_ bytes: ByteBuffer) {
        guard buffer != nil, buffer!.readableBytes > 0 else {
            buffer = bytes
            return
        }
        guard spill == nil else {
            // Frames were left untaken (back-pressure, a turn's budget): the read goes after them.
            copiedBytes += bytes.readableBytes
            spill!.writeImmutableBuffer(bytes)
            return
        }
        let held = buffer!.readableBytes
        guard let frameSize = frameSize(held: held, then: bytes), frameSize > held else {
            // Whole frames left untaken, a length prefix still not whole, or a frame nextRawFrame() will refuse.
            copiedBytes += bytes.readableBytes
            buffer!.writeImmutableBuffer(bytes)
            return
        }
        let taken = min(frameSize - held, bytes.readableBytes)
        let completion = bytes.getSlice(at: bytes.readerIndex, length: taken)!
        // Written in place only into a buffer no one else holds (one made below, or a read buffer NIO's pool let
        // go): a pooled read buffer is shared with the pool, and writing into one copies all of it first.
        let wroteInPlace =
            buffer!.readerIndex == 0 && buffer!.modifyIfUniquelyOwned { $0.writeImmutableBuffer(completion) } != nil
        if !wroteInPlace {
            // Room for what came so far and up to 64 KiB more, not for a length a client merely declared.
            let capacity = min(frameSize, max(held + taken, 65_536))
            var frame = ByteBufferAllocator().buffer(capacity: capacity)
            frame.writeImmutableBuffer(buffer!)
            frame.writeImmutableBuffer(completion)
            copiedBytes += held
            buffer = frame
        }
        copiedBytes += taken
        if bytes.readableBytes > taken {
            spill = bytes.getSlice(at: bytes.readerIndex + taken, length: bytes.readableBytes - taken)!
        }
    }

    /// The size of the frame that starts the buffer, whose first `held` bytes are buffered and whose length prefix
    /// may end in `bytes`; `nil` when the prefix is not whole even with `bytes`, or is a length nextRawFrame() refuses.
    @inlinable
    func frameSize(held: Int, then bytes: ByteBuffer) -> Int? {
        let prefix = ProtocolConstants.lengthPrefixSize
        guard held + bytes.readableBytes >= prefix else { return nil }
        var length: UInt32 = 0
        for index in 0..<prefix {
            let byte =
                index < held
                ? buffer!.getInteger(at: buffer!.readerIndex + index, as: UInt8.self)!
                : bytes.getInteger(at: bytes.readerIndex + index - held, as: UInt8.self)!
            length = length << 8 | UInt32(byte)
        }
        guard length > 0, length <= maxFrameLength else { return nil }
        return prefix + Int(length)
    }

    /// Takes ``spill`` as the buffer once the buffer is used up.
    @inlinable
    mutating func bufferUsedUp() {
        buffer = spill
        spill = nil
    }

    /// The next whole frame, or `nil` when more bytes are needed.
    ///
    /// After an error the stream cannot be resynchronised: the caller closes the connection.
    @inlinable
    package mutating func next() throws(WireDecodingError) -> Frame? {
        guard var raw = try nextRawFrame() else { return nil }
        return try Frame.decode(type: raw.type, body: &raw.body)
    }

    /// The next whole frame's type byte and fields, undecoded, or `nil` when more bytes are needed.
    ///
    /// For readers that look at some frames' bytes before deciding to decode them (the daemon recognises a
    /// run of posts to one name without building a `String` per post); ``WireFrameDecodable/decode(type:body:)``
    /// decodes the result.
    @inlinable
    package mutating func nextRawFrame() throws(WireDecodingError) -> (type: UInt8, body: ByteBuffer)? {
        guard buffer != nil else { return nil }
        guard let length = buffer!.getInteger(at: buffer!.readerIndex, endianness: .big, as: UInt32.self) else {
            return nil
        }
        if length == 0 { throw WireDecodingError.emptyFrame }
        if length > maxFrameLength { throw WireDecodingError.frameTooLarge(length: length, limit: maxFrameLength) }
        // A partial frame stays where it is: the next read moves it into a buffer of its own (see append(_:)), so
        // a long-lived connection does not grow its buffer. Compacting here, while the buffer shares its storage
        // with NIO until channelRead returns, allocated a new storage of the read's size.
        guard buffer!.readableBytes >= ProtocolConstants.lengthPrefixSize + Int(length) else { return nil }
        buffer!.moveReaderIndex(forwardBy: ProtocolConstants.lengthPrefixSize)
        var body = buffer!.readSlice(length: Int(length))!
        if buffer!.readableBytes == 0 { bufferUsedUp() }
        let type: UInt8 = body.readInteger()!
        return (type, body)
    }

    /// Offers the next whole frame's type byte and fields, in place (no `ByteBuffer` slice), to `body`, and consumes
    /// the frame if `body` returns `true`: for a reader that serves most frames from their bytes and decodes the
    /// rest (then ``nextRawFrame()`` returns the same frame).
    ///
    /// The accumulator is being accessed while `body` runs, and the fields are its bytes: nothing `body` does may
    /// reach the accumulator (the daemon defers its own channel's writes meanwhile, since a failed write reads).
    ///
    /// - Returns: whether `body` took the frame; `nil` when no whole frame is buffered.
    /// - Throws: as ``nextRawFrame()`` does, for the same frames.
    @inlinable
    package mutating func takeNextFrameInPlace(
        _ body: (UInt8, UnsafeRawBufferPointer) -> Bool
    ) throws(WireDecodingError) -> Bool? {
        guard buffer != nil else { return nil }
        let maxFrameLength = maxFrameLength
        let taken: Int? = try buffer!.withUnsafeReadableBytes { bytes throws(WireDecodingError) -> Int? in
            guard let frame = try Self.frame(in: bytes, at: 0, maxFrameLength: maxFrameLength) else { return nil }
            return body(frame.type, frame.fields) ? frame.end : 0
        }
        guard let taken else { return nil }
        guard taken > 0 else { return false }
        buffer!.moveReaderIndex(forwardBy: taken)
        if buffer!.readableBytes == 0 { bufferUsedUp() }
        return true
    }

    /// Offers the whole frames buffered, one after another and in place, to `body`, consuming each one it takes,
    /// until it declines one (which ``nextRawFrame()`` then returns), takes one and sets its `stop` argument, or no
    /// whole, valid frame is left (an invalid one is left for ``nextRawFrame()`` to throw for): for a reader that
    /// serves runs of frames from their bytes. One access to the buffer for the whole run, where
    /// ``takeNextFrameInPlace(_:)`` makes one per frame.
    ///
    /// As with ``takeNextFrameInPlace(_:)``, nothing `body` does may reach the accumulator.
    ///
    /// - Returns: the number of frames `body` took.
    @inlinable
    package mutating func takeFramesInPlace(_ body: (UInt8, UnsafeRawBufferPointer, _ stop: inout Bool) -> Bool) -> Int {
        let maxFrameLength = maxFrameLength
        var total = 0
        while buffer != nil {
            let (count, end, stopped) = buffer!.withUnsafeReadableBytes { bytes -> (Int, Int, Bool) in
                var count = 0
                var offset = 0
                var stop = false
                while !stop, let frame = try? Self.frame(in: bytes, at: offset, maxFrameLength: maxFrameLength),
                    body(frame.type, frame.fields, &stop)
                {
                    count += 1
                    offset = frame.end
                }
                return (count, offset, stop)
            }
            total += count
            guard end > 0 else { break }
            buffer!.moveReaderIndex(forwardBy: end)
            guard buffer!.readableBytes == 0 else { break }
            // Every frame of the buffer was taken: the run goes on into the rest of the read, if any.
            bufferUsedUp()
            if stopped { break }
        }
        return total
    }

    /// Calls `body` with the type byte and fields of each whole frame buffered, up to `limit` frames, without
    /// consuming them: for a reader that prepares for the frames ahead (the daemon starts loading the memory their
    /// names will reach). Stops at the first frame not whole or not valid; ``nextRawFrame()`` judges those.
    @inlinable
    package func forEachBufferedFrame(limit: Int, _ body: (UInt8, UnsafeRawBufferPointer) -> Void) {
        guard let buffer else { return }
        var left = limit
        // The spill's frames follow only when the buffer holds whole frames and nothing else.
        guard Self.forEachFrame(in: buffer, left: &left, maxFrameLength: maxFrameLength, body), let spill else { return }
        _ = Self.forEachFrame(in: spill, left: &left, maxFrameLength: maxFrameLength, body)
    }

    /// Calls `body` for the whole frames of `part`, up to `left`; whether it ended exactly after its last frame.
    @inlinable
    static func forEachFrame(
        in part: ByteBuffer, left: inout Int, maxFrameLength: UInt32, _ body: (UInt8, UnsafeRawBufferPointer) -> Void
    ) -> Bool {
        part.withUnsafeReadableBytes { bytes in
            var offset = 0
            while left > 0 {
                guard let frame = try? Self.frame(in: bytes, at: offset, maxFrameLength: maxFrameLength) else {
                    return offset == bytes.count
                }
                body(frame.type, frame.fields)
                offset = frame.end
                left -= 1
            }
            return false
        }
    }

    /// The frame that starts at `offset` in `bytes`: its type byte, its fields, and the offset after it; `nil` when
    /// it is not whole yet. Throws for a frame ``nextRawFrame()`` throws for (empty, or over `maxFrameLength`).
    @inlinable @inline(__always)
    static func frame(
        in bytes: UnsafeRawBufferPointer, at offset: Int, maxFrameLength: UInt32
    ) throws(WireDecodingError) -> (type: UInt8, fields: UnsafeRawBufferPointer, end: Int)? {
        let prefix = ProtocolConstants.lengthPrefixSize
        guard bytes.count - offset >= prefix else { return nil }
        let length = Int(UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
        if length == 0 { throw WireDecodingError.emptyFrame }
        if length > maxFrameLength { throw WireDecodingError.frameTooLarge(length: UInt32(length), limit: maxFrameLength) }
        let end = offset + prefix + length
        guard end <= bytes.count else { return nil }
        return (bytes[offset + prefix], UnsafeRawBufferPointer(rebasing: bytes[(offset + prefix + 1)..<end]), end)
    }

    /// Call when the stream has ended: throws if part of a frame was left unread.
    @inlinable
    package func finish() throws(WireDecodingError) {
        if bufferedBytes > 0 { throw WireDecodingError.truncatedFrame(bufferedBytes: bufferedBytes) }
    }
}
