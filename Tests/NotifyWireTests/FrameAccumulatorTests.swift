import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@Suite("FrameAccumulator")
struct FrameAccumulatorTests {
    /// A stream of client frames of every type, including a few large ones and edge values.
    static let clientFrames: [ClientFrame] = {
        var frames: [ClientFrame] = [
            .hello(.init(clientName: "stream-test")),
            .subscribe(.init(requestID: 1, subscriptionID: 0, pattern: "org.example.a")),
            .subscribe(
                .init(
                    requestID: 2, subscriptionID: .max, flags: .sendRetained, policy: .queue(limit: .max),
                    pattern: "de.beispiel.größe")),
            .subscribe(.init(requestID: 7, subscriptionID: 3, policy: .disconnect, pattern: "org.*.>")),
            .post(.init(requestID: 3, flags: .ackWanted, name: "org.example.a", payload: ByteBuffer(string: "x"))),
            .post(.init(requestID: 4, name: "org.example.a", payload: ByteBuffer())),
            .ping(requestID: 5),
            .unsubscribe(requestID: 6, subscriptionID: 0),
            .setState(requestID: 8, name: "org.example.a", value: .max),
            .getState(requestID: 9, name: "org.example.a"),
            .suspend(requestID: 10),
            .resume(requestID: 11),
            .query(requestID: 12, kind: QueryKind.names.rawValue, argument: "org.>"),
            .post(.init(requestID: 13, flags: [.ackWanted, .retain], name: "org.example.a", payload: ByteBuffer(string: "r"))),
            .hello(.init(version: 9, flags: 0xFFFF_FFFF, clientName: "")),
        ]
        for index in 0..<5 {
            let size = [1, 255, 4_096, 65_536, 70_000][index]
            let payload = ByteBuffer(bytes: (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) })
            frames.append(.post(.init(requestID: UInt32(100 + index), name: "big.\(index)", payload: payload)))
        }
        return frames
    }()

    static let serverFrames: [ServerFrame] = [
        .welcome(
            .init(
                daemonPID: 1, instanceID: InstanceID(high: 1, low: 2), limits: .default, serverName: "notifyd test")),
        .ok(requestID: 1),
        .notification(
            NotificationFrame(
                sequence: 1, sender: SenderCredentials(pid: 2, uid: 3, gid: 4), name: "a.b",
                payload: ByteBuffer(bytes: Array(repeating: 0xAB, count: 3_000)))),
        .posted(requestID: 3, sequence: .max, deliveredCount: .max),
        .overflow(subscriptionID: 9, droppedCount: 1),
        .pong(requestID: 5),
        .state(requestID: 6, value: 7),
        .state(requestID: 7, value: nil),
        .notificationMerged(
            mergedCount: 3,
            NotificationFrame(
                sequence: 2, sender: SenderCredentials(pid: 2, uid: 3, gid: 4), name: "a.b",
                payload: ByteBuffer(bytes: Array(repeating: 0xCD, count: 2_000)))),
        .retained(
            requestID: 8,
            NotificationFrame(sequence: 1, sender: SenderCredentials(pid: 2, uid: 3, gid: 4), name: "a.c", payload: ByteBuffer())),
        .queryResult(requestID: 9, json: ByteBuffer(string: #"{"connections":1}"#)),
        .overflow(subscriptionID: 0, droppedCount: 4),
        .error(ErrorFrame(requestID: 0, code: .internalError, message: "bye")),
    ]

    static var clientStream: [UInt8] { clientFrames.flatMap(\.encodedBytes) }
    static var serverStream: [UInt8] { serverFrames.flatMap(\.encodedBytes) }

    /// A notification of `payloadBytes` bytes, for the tests of large frames.
    static func largeNotification(_ name: String, payloadBytes: Int, sequence: UInt64 = 1) -> ServerFrame {
        .notification(
            NotificationFrame(
                sequence: sequence, sender: SenderCredentials(pid: 2, uid: 3, gid: 4), name: name,
                payload: ByteBuffer(repeating: 0x5A, count: payloadBytes)))
    }

    /// `bytes` as NIO reads them: into a pooled buffer of 64 KiB, which the pool keeps (the caller holds it).
    static func pooledRead(_ bytes: ArraySlice<UInt8>) -> ByteBuffer {
        var read = ByteBufferAllocator().buffer(capacity: 65_536)
        read.writeBytes(bytes)
        return read
    }

    @Test("the whole stream in one read")
    func oneRead() {
        let result = decodeStream(chunks: [Self.clientStream[...]], as: ClientFrame.self, maxFrameLength: 131_072)
        #expect(result.error == nil)
        #expect(result.frames == Self.clientFrames)
    }

    @Test("one byte at a time")
    func oneByteAtATime() {
        let stream = Self.clientStream
        let chunks = stream.indices.map { stream[$0...$0] }
        let result = decodeStream(chunks: chunks, as: ClientFrame.self, maxFrameLength: 131_072)
        #expect(result.error == nil)
        #expect(result.frames == Self.clientFrames)

        let serverStream = Self.serverStream
        let serverResult = decodeStream(
            chunks: serverStream.indices.map { serverStream[$0...$0] }, as: ServerFrame.self, maxFrameLength: 131_072)
        #expect(serverResult.error == nil)
        #expect(serverResult.frames == Self.serverFrames)
    }

    @Test("random chunk sizes", arguments: [1, 2, 3, 42, 0xDEAD_BEEF] as [UInt64])
    func randomChunks(seed: UInt64) {
        var generator = SplitMix64(seed: seed)
        for maxChunk in [3, 17, 1_000, 100_000] {
            let chunks = NotifyWireTests.randomChunks(of: Self.clientStream, maxChunk: maxChunk, using: &generator)
            let result = decodeStream(chunks: chunks, as: ClientFrame.self, maxFrameLength: 131_072)
            #expect(result.error == nil, "seed \(seed), max chunk \(maxChunk)")
            #expect(result.frames == Self.clientFrames, "seed \(seed), max chunk \(maxChunk)")

            let serverChunks = NotifyWireTests.randomChunks(of: Self.serverStream, maxChunk: maxChunk, using: &generator)
            let serverResult = decodeStream(chunks: serverChunks, as: ServerFrame.self, maxFrameLength: 131_072)
            #expect(serverResult.error == nil, "seed \(seed), max chunk \(maxChunk)")
            #expect(serverResult.frames == Self.serverFrames, "seed \(seed), max chunk \(maxChunk)")
        }
    }

    @Test("every split point of a two-frame stream")
    func everySplitPoint() {
        let frames: [ClientFrame] = [
            .subscribe(.init(requestID: 1, subscriptionID: 2, pattern: "org.example.x")),
            .post(.init(requestID: 3, flags: .ackWanted, name: "org.example.x", payload: ByteBuffer(string: "hi"))),
        ]
        let stream = frames.flatMap(\.encodedBytes)
        for split in 1..<stream.count {
            let result = decodeStream(
                chunks: [stream[..<split], stream[split...]], as: ClientFrame.self, maxFrameLength: 131_072)
            #expect(result.error == nil, "split at \(split)")
            #expect(result.frames == frames, "split at \(split)")
        }
    }

    @Test("a long-lived stream with many partial frames stays correct")
    func longStream() {
        // Well over 64 KiB of frames cut in odd chunks, so the accumulator moves many partial frames into buffers
        // of their own and keeps the rest of many reads aside.
        let frames: [ClientFrame] = (0..<400).map { index in
            .post(
                .init(
                    requestID: UInt32(index), name: "load.\(index % 7)",
                    payload: ByteBuffer(bytes: Array(repeating: UInt8(index & 0xFF), count: 1_000 + index))))
        }
        let stream = frames.flatMap(\.encodedBytes)
        #expect(stream.count > 400_000)
        var generator = SplitMix64(seed: 7)
        let chunks = NotifyWireTests.randomChunks(of: stream, maxChunk: 5_000, using: &generator)
        let result = decodeStream(chunks: chunks, as: ClientFrame.self, maxFrameLength: 131_072)
        #expect(result.error == nil)
        #expect(result.frames.count == frames.count)
        #expect(result.frames == frames)
    }

    @Test("a read copies at most the one frame it completes: large frames in large reads are not copied again")
    func readsCopyAtMostOneFrame() throws {
        // 16 KiB notifications read 64 KiB at a time, each read drained before the next, as the library and the
        // daemon do: every read but the first ends inside a frame.
        let frames = (0..<60).map { Self.largeNotification("big", payloadBytes: 16_384, sequence: UInt64($0)) }
        let stream = frames.flatMap(\.encodedBytes)
        var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 131_072)
        var decoded = 0
        var reads = 0
        for start in stride(from: 0, to: stream.count, by: 65_536) {
            accumulator.append(ByteBuffer(bytes: stream[start..<min(start + 65_536, stream.count)]))
            reads += 1
            while try accumulator.next() != nil { decoded += 1 }
        }
        #expect(decoded == frames.count)
        #expect(accumulator.bufferedBytes == 0)
        let frameSize = stream.count / frames.count
        // Appending each read behind the partial frame copied nearly the whole stream (919 of 985 KB).
        #expect(accumulator.copiedBytes <= reads * frameSize, "\(accumulator.copiedBytes) bytes copied for \(reads) reads")
    }

    @Test("a partial frame in a read buffer that NIO's pool still holds is completed in a buffer of its own, not a copy of the read's storage")
    func partialFrameInSharedStorage() throws {
        let frame = Self.largeNotification("big", payloadBytes: 16_384)
        let bytes = frame.encodedBytes
        var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 131_072)
        // NIO reads into pooled buffers of 64 KiB and keeps them: the first read holds only the frame's start.
        let pooled = [Self.pooledRead(bytes[..<10_000]), Self.pooledRead(bytes[10_000...])]
        accumulator.append(pooled[0])
        #expect(try accumulator.next() == nil)
        accumulator.append(pooled[1])
        // Writing the rest into the pooled storage copied all 64 KiB of it into a storage of the accumulator's.
        #expect(accumulator.heldCapacity < 2 * bytes.count, "\(accumulator.heldCapacity) bytes held for one frame")
        #expect(try accumulator.next() == frame)
        withExtendedLifetime(pooled) {}
    }

    @Test("a frame larger than 64 KiB, read 64 KiB at a time into pooled buffers, is copied in linear time")
    func largeFrameInManyReads() throws {
        let frame = Self.largeNotification("huge", payloadBytes: 600_000)
        let bytes = frame.encodedBytes
        var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 20)
        let pooled = stride(from: 0, to: bytes.count, by: 65_536).map {
            Self.pooledRead(bytes[$0..<min($0 + 65_536, bytes.count)])
        }
        for read in pooled { accumulator.append(read) }
        #expect(try accumulator.next() == frame)
        // Copying what was held again at every read would be about 5 times the frame here.
        #expect(accumulator.copiedBytes <= 2 * bytes.count, "\(accumulator.copiedBytes) bytes copied for \(bytes.count)")
        withExtendedLifetime(pooled) {}
    }

    @Test("a partial frame whose declared length is large reserves what came, not what it declares")
    func declaredLengthIsNotReserved() throws {
        var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: 1 << 20)
        // A length prefix announcing 1 MiB, in two reads (the first still held by NIO's pool), then nothing.
        let first = ByteBuffer(bytes: [0x00, 0x10])
        let pooled = first
        accumulator.append(first)
        accumulator.append(ByteBuffer(bytes: [0x00, 0x00, 0x01]))
        #expect(try accumulator.next() == nil)
        #expect(accumulator.heldCapacity <= 65_536, "\(accumulator.heldCapacity) bytes held for 5 received")
        withExtendedLifetime(pooled) {}
    }

    @Test("reads appended while frames are left untaken (back-pressure) keep every byte, in order", arguments: [3, 19] as [UInt64])
    func framesLeftUntaken(seed: UInt64) throws {
        let frames: [ClientFrame] = (0..<300).map { index in
            .post(
                .init(
                    requestID: UInt32(index), name: "load.\(index % 5)",
                    payload: ByteBuffer(bytes: Array(repeating: UInt8(index & 0xFF), count: (index * 37) % 3_000))))
        }
        let stream = frames.flatMap(\.encodedBytes)
        var generator = SplitMix64(seed: seed)
        let chunks = NotifyWireTests.randomChunks(of: stream, maxChunk: 4_000, using: &generator)
        var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: 131_072)
        var decoded: [ClientFrame] = []
        var consumed = 0
        var spillsSeen = 0
        for (index, chunk) in chunks.enumerated() {
            accumulator.append(ByteBuffer(bytes: chunk))
            if accumulator.holdsSpill { spillsSeen += 1 }
            // Looked at and drained after every third read: in turn every whole frame (the next read then completes
            // the partial one and keeps its rest aside, the one after goes behind that rest), or only two (the rest
            // waits, as under back-pressure or a turn's budget).
            guard index % 3 == 2 else { continue }
            let appended = chunks[...index].reduce(0) { $0 + $1.count }
            let contentsKept = accumulator.bufferedContents == Array(stream[consumed..<appended])
            #expect(contentsKept, "bufferedContents is not the \(appended - consumed) bytes appended and not taken")
            // The frames looked at ahead are the whole frames buffered, in order (the daemon's prefetch).
            var ahead: [[UInt8]] = []
            accumulator.forEachBufferedFrame(limit: 50) { type, fields in ahead.append([type] + Array(fields)) }
            var whole: [[UInt8]] = []
            var offset = consumed
            for frame in frames[decoded.count...] {
                let encoded = frame.encodedBytes
                guard whole.count < 50, offset + encoded.count <= appended else { break }
                whole.append(Array(encoded.dropFirst(4)))
                offset += encoded.count
            }
            let sameFrames = ahead == whole
            #expect(sameFrames, "the \(ahead.count) frames looked at ahead are not the \(whole.count) whole frames buffered")
            let drain = (index / 3) % 2 == 0 ? Int.max : 2
            for _ in 0..<drain {
                guard let frame = try accumulator.next() else { break }
                decoded.append(frame)
                consumed += frame.encodedBytes.count
            }
        }
        #expect(spillsSeen > 10, "the rest of a read was kept aside \(spillsSeen) times")
        while let frame = try accumulator.next() { decoded.append(frame) }
        #expect(decoded == frames)
        #expect(accumulator.bufferedBytes == 0)
    }

    @Test("bufferedBytes and finish")
    func bufferedBytesAndFinish() throws {
        var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: 131_072)
        #expect(accumulator.bufferedBytes == 0)
        #expect(try accumulator.next() == nil)
        try accumulator.finish()  // nothing buffered: a clean end of stream

        let ping = ClientFrame.ping(requestID: 7).encodedBytes
        accumulator.append(ByteBuffer(bytes: ping[..<3]))
        #expect(accumulator.bufferedBytes == 3)
        #expect(try accumulator.next() == nil)
        #expect(throws: WireDecodingError.truncatedFrame(bufferedBytes: 3)) { try accumulator.finish() }

        accumulator.append(ByteBuffer(bytes: ping[3...] + ping[..<6]))
        #expect(accumulator.bufferedBytes == ping.count + 6)
        #expect(try accumulator.next() == .ping(requestID: 7))
        #expect(accumulator.bufferedBytes == 6)
        #expect(try accumulator.next() == nil)
        #expect(throws: WireDecodingError.truncatedFrame(bufferedBytes: 6)) { try accumulator.finish() }

        accumulator.append(ByteBuffer(bytes: ping[6...]))
        #expect(try accumulator.next() == .ping(requestID: 7))
        #expect(accumulator.bufferedBytes == 0)
        #expect(try accumulator.next() == nil)
        try accumulator.finish()
    }

    @Test("the accumulator's limit applies and can be raised after WELCOME")
    func limit() throws {
        let post = ClientFrame.post(
            .init(requestID: 1, name: "a", payload: ByteBuffer(bytes: Array(repeating: 1, count: 70_000)))
        ).encodedBytes
        let length = UInt32(post.count - 4)
        var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: ProtocolConstants.minimumMaxFrameLength)
        accumulator.append(ByteBuffer(bytes: post[..<4]))
        #expect(throws: WireDecodingError.frameTooLarge(length: length, limit: ProtocolConstants.minimumMaxFrameLength)) {
            try accumulator.next()
        }
        var raised = FrameAccumulator<ClientFrame>(maxFrameLength: ProtocolConstants.minimumMaxFrameLength)
        raised.maxFrameLength = 131_072
        raised.append(ByteBuffer(bytes: post))
        #expect(try raised.next()?.messageType == .post)
    }

    @Test("frames after an error are never returned")
    func errorStopsTheStream() {
        let stream = ClientFrame.ping(requestID: 1).encodedBytes + [0, 0, 0, 0] + ClientFrame.ping(requestID: 2).encodedBytes
        let result = decodeStream(chunks: [stream[...]], as: ClientFrame.self, maxFrameLength: 131_072)
        #expect(result.frames == [.ping(requestID: 1)])
        #expect(result.error == .emptyFrame)
        #expect(result.error?.code == .frameTooLarge)
    }

    @Test("frames taken in place and frames left for nextRawFrame make up the stream, in random chunks", arguments: [5, 77] as [UInt64])
    func takenInPlace(seed: UInt64) throws {
        var generator = SplitMix64(seed: seed)
        let stream = Self.clientStream
        var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: 131_072)
        var frames: [ClientFrame] = []
        var takenCount = 0
        for chunk in NotifyWireTests.randomChunks(of: stream, maxChunk: 5_000, using: &generator) {
            accumulator.append(ByteBuffer(bytes: chunk))
            while true {
                // Take the POSTs in place (decoding them from the bytes offered), leave the rest.
                var offered: ClientFrame?
                let taken = try accumulator.takeNextFrameInPlace { type, fields in
                    guard type == MessageType.post.rawValue else { return false }
                    var body = ByteBuffer(bytes: fields)
                    offered = try? ClientFrame.decode(type: type, body: &body)
                    return true
                }
                if taken == true {
                    frames.append(try #require(offered))
                    takenCount += 1
                    continue
                }
                guard var raw = try accumulator.nextRawFrame() else {
                    #expect(taken == nil, "a frame nextRawFrame lacks bytes for was offered")
                    break
                }
                #expect(raw.type != MessageType.post.rawValue)
                frames.append(try ClientFrame.decode(type: raw.type, body: &raw.body))
            }
        }
        #expect(frames == Self.clientFrames)
        #expect(takenCount == Self.clientFrames.filter { $0.messageType == .post }.count)
        try accumulator.finish()
    }

    @Test("runs of frames taken in place and the frames left for nextRawFrame make up the stream, in random chunks", arguments: [5, 77] as [UInt64])
    func runsTakenInPlace(seed: UInt64) throws {
        var generator = SplitMix64(seed: seed)
        let stream = Self.clientStream
        var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: 131_072)
        var frames: [ClientFrame] = []
        var takenCount = 0
        for chunk in NotifyWireTests.randomChunks(of: stream, maxChunk: 5_000, using: &generator) {
            accumulator.append(ByteBuffer(bytes: chunk))
            while true {
                let before = accumulator.bufferedBytes
                var offeredBytes = 0
                var stopped = false
                let taken = accumulator.takeFramesInPlace { type, fields, stop in
                    #expect(!stopped, "a frame was offered after the run was stopped")
                    guard type == MessageType.post.rawValue else { return false }
                    // A third of the frames taken end their run, as a reader does that must act between two frames.
                    stop = generator.next() % 3 == 0
                    stopped = stop
                    var body = ByteBuffer(bytes: fields)
                    if let frame = try? ClientFrame.decode(type: type, body: &body) { frames.append(frame) }
                    offeredBytes += 5 + fields.count
                    return true
                }
                takenCount += taken
                #expect(accumulator.bufferedBytes == before - offeredBytes, "exactly the frames taken were consumed")
                // Stopped after a frame taken: the next may be another post, for the next run.
                if stopped { continue }
                guard var raw = try accumulator.nextRawFrame() else { break }
                #expect(raw.type != MessageType.post.rawValue, "a declined or unread frame comes next")
                frames.append(try ClientFrame.decode(type: raw.type, body: &raw.body))
            }
        }
        #expect(frames == Self.clientFrames)
        #expect(takenCount == Self.clientFrames.filter { $0.messageType == .post }.count)
        try accumulator.finish()
    }

    @Test("a run taken in place stops before an invalid frame, which nextRawFrame then throws for")
    func runStopsAtInvalidFrame() throws {
        var accumulator = FrameAccumulator<ClientFrame>(maxFrameLength: 131_072)
        var stream = ByteBuffer()
        ClientFrame.post(.init(requestID: 1, name: "a.b", payload: ByteBuffer(bytes: [1, 2, 3]))).encode(into: &stream)
        ClientFrame.post(.init(requestID: 2, name: "a.c", payload: ByteBuffer())).encode(into: &stream)
        stream.writeBytes([0, 0, 0, 0, 1])  // an empty frame
        accumulator.append(stream)
        var names: [String] = []
        let taken = accumulator.takeFramesInPlace { type, fields, _ in
            var body = ByteBuffer(bytes: fields)
            guard case .post(let post)? = try? ClientFrame.decode(type: type, body: &body) else { return false }
            names.append(post.name)
            return true
        }
        #expect(taken == 2)
        #expect(names == ["a.b", "a.c"])
        #expect(throws: WireDecodingError.emptyFrame) { try accumulator.nextRawFrame() }
    }

    @Test("taking a frame in place throws what nextRawFrame throws: an empty frame, one over the limit")
    func takenInPlaceErrors() {
        var empty = FrameAccumulator<ClientFrame>(maxFrameLength: 131_072)
        empty.append(ByteBuffer(bytes: [0, 0, 0, 0, 1]))
        #expect(throws: WireDecodingError.emptyFrame) { try empty.takeNextFrameInPlace { _, _ in true } }
        var large = FrameAccumulator<ClientFrame>(maxFrameLength: ProtocolConstants.minimumMaxFrameLength)
        large.append(ByteBuffer(bytes: [0, 2, 0, 0]))
        #expect(throws: WireDecodingError.frameTooLarge(length: 131_072, limit: ProtocolConstants.minimumMaxFrameLength)) {
            try large.takeNextFrameInPlace { _, _ in true }
        }
    }
}
