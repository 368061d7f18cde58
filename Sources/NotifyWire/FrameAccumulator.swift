import NIOCore

/// Collects the bytes of a stream and cuts them into frames.
///
/// Both the daemon and the client library feed every read into an accumulator and drain whole frames from
/// it, so framing happens in one place and needs no extra channel handler.
public struct FrameAccumulator<Frame: WireFrameDecodable> {
    private var buffer: ByteBuffer?
    /// Frames longer than this (after the length prefix) are rejected with ``WireDecodingError/frameTooLarge(length:limit:)``.
    public var maxFrameLength: UInt32

    /// Creates an empty accumulator.
    public init(maxFrameLength: UInt32) {
        self.maxFrameLength = maxFrameLength
    }

    /// Bytes received but not yet returned as part of a frame.
    public var bufferedBytes: Int { buffer?.readableBytes ?? 0 }

    /// Adds bytes read from the stream.
    public mutating func append(_ bytes: ByteBuffer) {
        if buffer == nil || buffer!.readableBytes == 0 {
            buffer = bytes
        } else {
            buffer!.writeImmutableBuffer(bytes)
        }
    }

    /// The next whole frame, or `nil` when more bytes are needed.
    ///
    /// After an error the stream cannot be resynchronised: the caller closes the connection.
    public mutating func next() throws(WireDecodingError) -> Frame? {
        guard buffer != nil else { return nil }
        guard let frame = try Frame.decodeFrame(from: &buffer!, maxFrameLength: maxFrameLength) else {
            // Keep a partial frame compact so a long-lived connection does not grow its buffer.
            if buffer!.readerIndex > 65_536 { buffer!.discardReadBytes() }
            return nil
        }
        if buffer!.readableBytes == 0 { buffer = nil }
        return frame
    }

    /// Call when the stream has ended: throws if part of a frame was left unread.
    public func finish() throws(WireDecodingError) {
        if bufferedBytes > 0 { throw WireDecodingError.truncatedFrame(bufferedBytes: bufferedBytes) }
    }
}
