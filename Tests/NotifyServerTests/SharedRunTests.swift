#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOCore
import NIOPosix
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// A large run of posts is queued for its recipients by reference (``PostRun/sharedBytes(recipientCount:)``,
/// ``OutboundQueue/appendShared(_:)``): no copy per recipient, the same bytes for each, in order with everything
/// else the connection is sent, and never more storage kept than twice the bytes a recipient is charged.
@Suite("Runs shared among their recipients")
struct SharedRunTests {
    private static func post(_ name: String, _ index: Int, size: Int) -> ClientFrame {
        var payload = ByteBuffer(repeating: UInt8(truncatingIfNeeded: index), count: size)
        payload.setInteger(UInt32(index), at: 0)
        return .post(ClientFrame.Post(requestID: 0, name: name, payload: payload))
    }

    /// The address of the storage a buffer's readable bytes are in.
    private static func address(_ buffer: ByteBuffer) -> UInt {
        buffer.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
    }

    @Test("every subscriber of a long burst is written the same storage, and decodes the same notifications in order")
    func subscribersShareOneRun() throws {
        let daemon = EmbeddedBroker()
        var subscribers: [EmbeddedPeer] = []
        for index in 0..<3 {
            let subscriber = try daemon.connect("subscriber-\(index)")
            try subscriber.hello()
            try subscriber.subscribe("shared.run", id: 1, policy: .queue(limit: 1_000))
            subscribers.append(subscriber)
        }
        let poster = try daemon.connect("poster")
        try poster.hello()
        // 40 posts of 1 KB in one read: two runs filled to the run's byte limit, then the rest.
        try poster.send((1...40).map { Self.post("shared.run", $0, size: 1_000) })
        daemon.run()

        var chunksBySubscriber: [[ByteBuffer]] = []
        for subscriber in subscribers {
            var chunks: [ByteBuffer] = []
            while let chunk = try subscriber.channel.readOutbound(as: ByteBuffer.self) {
                if chunk.readableBytes > 0 { chunks.append(chunk) }
            }
            chunksBySubscriber.append(chunks)
        }
        // The runs that filled their storage went out as they were: the same storage for every subscriber.
        let firstRuns = chunksBySubscriber.map { $0.first { $0.readableBytes >= PostRun.byteLimit } }
        let addresses = try firstRuns.map { try #require($0, "a whole run written as one chunk") }.map(Self.address)
        #expect(Set(addresses).count == 1, "one storage for the three subscribers: \(addresses)")

        for chunks in chunksBySubscriber {
            var accumulator = FrameAccumulator<ServerFrame>(maxFrameLength: 1 << 20)
            for chunk in chunks { accumulator.append(chunk) }
            var indices: [UInt32] = []
            while let frame = try accumulator.next() {
                let notification = try #require(frame.notification, "\(frame.summary)")
                indices.append(try #require(notification.payload.getInteger(at: notification.payload.readerIndex, as: UInt32.self)))
            }
            #expect(indices == Array(1...40))
        }
    }

    @Test("a run's shared storage is never more than twice its bytes; small runs to one recipient are copied")
    func sharedStorageIsBounded() throws {
        let peers = makeDetachedPeers(1, label: "shared-run")
        var run = PostRun(allocator: ByteBufferAllocator())
        run.open(poster: peers[0], name: "bounded.run", generation: 0, reusing: nil)
        let payload = [UInt8](repeating: 7, count: 1_000)
        func append(_ count: Int) {
            payload.withUnsafeBytes { bytes in
                for sequence in 0..<count { run.append(sequence: UInt64(sequence), payload: bytes) }
            }
        }

        // A small run: copied by its one recipient; copied once, to storage of its size, for several.
        append(5)
        #expect(run.sharedBytes(recipientCount: 1) == nil)
        let copy = try #require(run.sharedBytes(recipientCount: 4))
        #expect(copy.readableBytesView.elementsEqual(run.encoded.readableBytesView))
        #expect(Self.address(copy) != Self.address(run.encoded))
        #expect(copy.capacity <= 2 * copy.readableBytes, "capacity \(copy.capacity) for \(copy.readableBytes) bytes")
        run.clearFrames()

        // A run that fills half its storage or more is shared as it is, and the next one starts in new storage.
        append(17)
        let whole = try #require(run.sharedBytes(recipientCount: 1))
        #expect(Self.address(whole) == Self.address(run.encoded))
        #expect(whole.capacity <= 2 * whole.readableBytes, "capacity \(whole.capacity) for \(whole.readableBytes) bytes")
        let bytes = Array(whole.readableBytesView)
        run.clearFrames()
        append(1)
        #expect(Self.address(run.encoded) != Self.address(whole))
        #expect(Array(whole.readableBytesView) == bytes, "the shared bytes are left as they were")
    }

    @Test("shared bytes go out in order with the connection's own, and are owed in a hand-over until written")
    func sharedSegmentsKeepOrder() throws {
        var queue = OutboundQueue(allocator: ByteBufferAllocator(), batchCapacityLimit: 64 * 1024)
        let shared = ByteBuffer(bytes: [UInt8](repeating: 2, count: 3_000))
        queue.append(ByteBuffer(bytes: [1, 1]))
        queue.appendShared(shared)
        queue.append(ByteBuffer(bytes: [3]))
        #expect(queue.pendingBytes == 3_003)
        #expect(queue.owedBytes(unwrittenInChannel: 0) == [1, 1] + [UInt8](repeating: 2, count: 3_000) + [3])

        // A channel that keeps everything it is given: the write is not finished.
        var channel: [ByteBuffer] = []
        var first = queue.handOver { channel.append($0) }
        let count = first.count
        #expect(count == 3_003)
        #expect(channel.map(\.readableBytes) == [2, 3_000, 1])
        #expect(Self.address(channel[1]) == Self.address(shared), "written from its own storage, not copied")
        let firstCompleted = queue.settleHandOver(&first)
        #expect(!firstCompleted, "the channel still holds the bytes")
        #expect(queue.pendingBytes == 3_003)
        // 1,001 bytes not yet written to the socket: the last of the batch.
        #expect(queue.owedBytes(unwrittenInChannel: 1_001) == [UInt8](repeating: 2, count: 1_000) + [3])
        channel.removeAll()
        queue.completeWrite(count)
        #expect(queue.pendingBytes == 0)

        // Shared bytes alone: the queue's marker tells whether the channel finished the write.
        queue.appendShared(shared)
        var second = queue.handOver { channel.append($0) }
        #expect(channel.map(\.readableBytes) == [3_000, 0])
        let secondCompleted = queue.settleHandOver(&second)
        #expect(!secondCompleted)
        channel.removeAll()
        queue.completeWrite(3_000)
        queue.appendShared(shared)
        var third = queue.handOver { _ in }
        let thirdCompleted = queue.settleHandOver(&third)
        #expect(thirdCompleted, "a channel that let go of everything wrote it")
    }

    @Test("a hand-over inside another (NIO reads the channel inside a failed write's flush) is settled on its own, and the counts stay right")
    func nestedHandOvers() {
        var queue = OutboundQueue(allocator: ByteBufferAllocator(), batchCapacityLimit: 64 * 1024)
        var channel: [ByteBuffer] = []
        queue.appendShared(ByteBuffer(repeating: 1, count: 3_000))
        var outer = queue.handOver { channel.append($0) }
        // Inside the outer flush: the peer's request is served and its reply flushed.
        queue.append(ByteBuffer(repeating: 2, count: 10))
        var inner = queue.handOver { channel.append($0) }
        let (outerCount, innerCount) = (outer.count, inner.count)
        let innerCompleted = queue.settleHandOver(&inner)
        let outerCompleted = queue.settleHandOver(&outer)
        #expect(!innerCompleted && !outerCompleted, "the channel holds both")
        #expect(channel.map(\.readableBytes) == [3_000, 0, 10])
        #expect(queue.pendingBytes == 3_010)
        channel.removeAll()
        queue.completeWrite(innerCount)
        queue.completeWrite(outerCount)
        #expect(queue.pendingBytes == 0)
        queue.append(ByteBuffer(repeating: 3, count: 10))
        var last = queue.handOver { _ in }
        let lastCompleted = queue.settleHandOver(&last)
        #expect(lastCompleted)
    }

    @Test("frames queued before a shared run go out in storage of their size: a stopped peer keeps no batch's worth per run")
    func framesBeforeASharedRunAreNotPinnedInABatch() throws {
        var queue = OutboundQueue(allocator: ByteBufferAllocator(), batchCapacityLimit: 288 * 1024)
        // A large batch, written at once: the next batch is given storage of its size up front.
        queue.append(ByteBuffer(repeating: 0, count: 200_000))
        var batch = queue.handOver { _ in }
        let count = batch.count
        let completed = queue.settleHandOver(&batch)
        #expect(completed)
        queue.completeWrite(count)

        var channel: [ByteBuffer] = []
        for _ in 0..<3 {
            queue.append(ByteBuffer(repeating: 1, count: 40))
            queue.appendShared(ByteBuffer(repeating: 2, count: 20_000))
        }
        _ = queue.handOver { channel.append($0) }
        #expect(channel.map(\.readableBytes) == [40, 20_000, 40, 20_000, 40, 20_000, 0])
        let ownFrames = channel.enumerated().filter { $0.offset % 2 == 0 && $0.element.readableBytes > 0 }.map(\.element)
        #expect(ownFrames.allSatisfy { $0.capacity <= 4_096 }, "capacities \(ownFrames.map(\.capacity))")
        #expect(queue.buffer.capacity <= 4_096, "the idle queue keeps \(queue.buffer.capacity) bytes of storage")
    }

    @Test("on a socket, a write the kernel takes whole needs no completion, a larger one does, and the channel lets go of the marker once it is written")
    func markerOnASocket() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            try await Self.checkMarker(on: group.next())
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    private final class QueueBox: @unchecked Sendable {
        // Used on the channel's event loop only.
        var queue = OutboundQueue(allocator: ByteBufferAllocator(), batchCapacityLimit: 64 * 1024)

        /// Hands everything queued to `channel` as `Peer.flush` does; whether the write completed within the call.
        func flush(_ channel: Channel) -> Bool {
            var handOver = queue.handOver { channel.write($0, promise: nil) }
            let count = handOver.count
            channel.flush()
            let completed = queue.settleHandOver(&handOver)
            if completed { queue.completeWrite(count) }
            return completed
        }
    }

    /// Reads everything that comes, once reading is switched on, and says when `target` bytes have come.
    private final class DrainCounter: ChannelInboundHandler, @unchecked Sendable {
        // Used on the channel's event loop only.
        typealias InboundIn = ByteBuffer
        let target: Int
        let drained: EventLoopPromise<Void>
        private var total = 0

        init(target: Int, drained: EventLoopPromise<Void>) {
            self.target = target
            self.drained = drained
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            total += unwrapInboundIn(data).readableBytes
            if total >= target { drained.succeed(()) }
        }
    }

    private static func checkMarker(on loop: EventLoop) async throws {
        var pair: [CInt] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        // A send buffer of known size: 4 MiB cannot fit it whatever the host's default.
        var sendBuffer: CInt = 64 * 1024
        try #require(setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &sendBuffer, socklen_t(MemoryLayout<CInt>.size)) == 0)
        let channel = try await ClientBootstrap(group: loop).withConnectedSocket(pair[0]).get()
        defer { channel.close(promise: nil) }
        // The other end reads through the event loop too (no thread of the tests' pool blocked on a read), and only
        // once told to.
        let big = 4 << 20
        let counter = DrainCounter(target: 3_000 + big, drained: loop.makePromise())
        let reader = try await ClientBootstrap(group: loop)
            .channelOption(ChannelOptions.autoRead, value: false)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(counter) }
            }
            .withConnectedSocket(pair[1]).get()
        defer { reader.close(promise: nil) }
        let box = QueueBox()

        let small = try await loop.submit {
            box.queue.appendShared(ByteBuffer(repeating: 1, count: 3_000))
            return box.flush(channel)
        }.get()
        #expect(small, "3,000 bytes fit the socket's buffer")

        // 4 MiB do not, while nobody reads: the write is left to finish later, after which a barrier completes.
        let (completed, written) = try await loop.submit {
            box.queue.appendShared(ByteBuffer(repeating: 2, count: big))
            let completed = box.flush(channel)
            let written = loop.makePromise(of: Void.self)
            channel.writeAndFlush(ByteBuffer(), promise: written)
            return (completed, written.futureResult)
        }.get()
        #expect(!completed, "4 MiB cannot all be in the socket's buffer")
        let deadline = loop.scheduleTask(in: defaultTimeout) {
            counter.drained.fail(TestFailure("the reader did not get \(counter.target) bytes in \(defaultTimeout.secondsDescription)"))
        }
        try await reader.setOption(ChannelOptions.autoRead, value: true).get()
        try await counter.drained.futureResult.get()
        deadline.cancel()
        try await written.get()

        let afterwards = try await loop.submit {
            box.queue.completeWrite(big)
            box.queue.appendShared(ByteBuffer(repeating: 3, count: 3_000))
            return box.flush(channel)
        }.get()
        #expect(afterwards, "the marker of the finished write is no longer held by the channel")
    }
}
