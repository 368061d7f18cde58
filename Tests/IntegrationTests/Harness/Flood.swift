import NIOCore
import NotifyTestSupport
import NotifyWire

// MARK: Flood: many posts over a few names

/// The names and payloads of a flood: `total` posts round-robin over `names`; the k-th post to a name carries the
/// decimal text of k, so a reader can check per-name order and the last value of each name.
struct Flood: Sendable {
    var names: [String]
    var total: Int

    var perName: Int { total / names.count }
    /// The payload of the last post to each name.
    var finalPayload: String { "\(perName - 1)" }

    init(prefix: String, nameCount: Int, total: Int) {
        precondition(total % nameCount == 0)
        names = (0..<nameCount).map { "\(prefix).n\($0)" }
        self.total = total
    }

    /// Posts everything fire-and-forget on a fresh connection at full speed, in large writes, then waits for the
    /// `PONG` of a final `PING`: when this returns, the daemon has processed (fanned out) every post. Fails if the
    /// daemon answers anything but `WELCOME` and `PONG`.
    ///
    /// With `reader`, the poster keeps at most `window` posts ahead of what that reader has received (or been told
    /// it lost): a reader that must receive everything is then never outrun by a poster on a busy machine, where the
    /// daemon would rightly merge for it, while every other subscriber (a stopped one) is still flooded.
    func post(to path: String, pacedBy reader: FloodReader? = nil, window: Int = 10_000) async throws {
        let connection = try await TestClient.connect(to: path, name: "flood-poster")
        try await connection.hello()
        let batchLimit = reader == nil ? 1 << 18 : 1 << 16
        var batch = ByteBuffer()
        batch.reserveCapacity(1 << 19)
        for index in 0..<total {
            // Request id 0: fire-and-forget, no reply.
            let post = ClientFrame.Post(
                requestID: 0, name: names[index % names.count], payload: ByteBuffer(string: "\(index / names.count)"))
            ClientFrame.post(post).encode(into: &batch)
            if batch.readableBytes >= batchLimit || index == total - 1 {
                if let reader {
                    let ahead = index + 1 - window
                    _ = try await poll(
                        "the paced reader to come within \(window) posts of \(index + 1)", timeout: 60,
                        interval: .milliseconds(1)
                    ) {
                        let reception = reader.reception
                        return reception.received + Int(reception.lost) >= ahead ? true : nil
                    }
                }
                try await connection.sendBuffer(batch, timeout: .seconds(60))
                batch.clear()
            }
        }
        let before = try await connection.barrier()
        guard before.isEmpty else { throw TestFailure("the poster expected only PONG, got \(before.map(\.summary))") }
        await connection.close()
    }
}

/// What a flood reader saw.
struct FloodReception: Sendable {
    /// Notification frames (plain or merged).
    var received = 0
    /// Notifications the daemon merged away or dropped for the reader (it should lose none).
    var lost: UInt64 = 0
    var lastSequence: UInt64 = 0
    /// The first few things that went wrong.
    var problems: [String] = []
    /// The payload counter expected next, per name.
    fileprivate var expected: [Int] = []

    fileprivate mutating func problem(_ text: String) {
        if problems.count < 5 { problems.append(text) }
    }

    /// Takes one frame, undecoded (a million decoded frames would be too slow for a debug build to keep up);
    /// returns whether more are to come.
    fileprivate mutating func take(type: UInt8, body frame: ByteBuffer, of flood: Flood) -> Bool {
        var body = frame
        var merged: UInt64 = 0
        switch type {
        case MessageType.notification.rawValue:
            break
        case MessageType.notificationMerged.rawValue:
            merged = body.readInteger(as: UInt64.self) ?? 0
            lost += merged
            problem("NOTIFICATION_MERGED (+\(merged)) after \(received) notifications")
        case MessageType.overflow.rawValue:
            let dropped = body.getInteger(at: body.readerIndex + 4, as: UInt64.self) ?? 0
            lost += dropped
            problem("OVERFLOW (\(dropped) dropped) after \(received) notifications")
            return received + Int(lost) < flood.total
        default:
            var buffer = frame
            let decoded = try? ServerFrame.decode(type: type, body: &buffer)
            problem("unexpected frame after \(received) notifications: \(decoded.map(\.summary) ?? "type \(type)")")
            return false
        }
        // sequence u64 | pid u32 | uid u32 | gid u32 | name string | payload bytes
        let start = body.readerIndex
        let sequence = body.getInteger(at: start, as: UInt64.self) ?? 0
        let nameLength = Int(body.getInteger(at: start + 20, as: UInt16.self) ?? 0)
        var counter = 0
        for byte in body.readableBytesView.dropFirst(22 + nameLength + 4) { counter = counter * 10 + Int(byte) - 48 }
        if sequence <= lastSequence { problem("sequence \(sequence) after \(lastSequence)") }
        // The names differ only in their last byte (`<prefix>.n0` … `<prefix>.n9`): index by it, check the rest
        // now and then.
        let last = Int(body.getInteger(at: start + 22 + nameLength - 1, as: UInt8.self) ?? 0) - 48
        let index: Int? =
            nameLength == flood.names[0].utf8.count && flood.names.indices.contains(last)
                && (received % 1_000 != 0 || body.getString(at: start + 22, length: nameLength) == flood.names[last])
            ? last : nil
        if let index {
            if merged == 0, counter != expected[index] {
                problem("\(flood.names[index]): payload \(counter), expected \(expected[index])")
            }
            expected[index] = counter + 1
        } else {
            problem("unexpected name \(body.getString(at: start + 22, length: nameLength) ?? "?")")
        }
        lastSequence = sequence
        received += 1
        return received + Int(lost) < flood.total
    }
}

/// A subscriber of every name of a flood on a raw connection: it must receive every post, in order.
final class FloodReader: Sendable {
    private let state = Locked(FloodReception())
    private let readySignal = Locked(false)

    var reception: FloodReception { state.withLock { $0 } }
    var isReady: Bool { readySignal.withLock { $0 } }

    /// Connects, subscribes (coalesce) and reads until every post of the flood was received or reported lost
    /// (merged or dropped). It keeps reading after a loss, so it never becomes a stalled client.
    func run(_ flood: Flood, path: String) async throws {
        let connection = try await TestClient.connect(to: path, name: "flood-reader")
        try await connection.hello()
        for (index, name) in flood.names.enumerated() {
            try await connection.subscribe(name, id: UInt32(index + 1))
        }
        state.withLock { $0.expected = [Int](repeating: 0, count: flood.names.count) }
        readySignal.withLock { $0 = true }
        let state = self.state
        precondition(flood.names.count <= 10)
        let end = try await connection.consumeFrames(timeout: .seconds(600)) { type, body in
            state.withLock { $0.take(type: type, body: body, of: flood) }
        }
        if let end { state.withLock { $0.problem("the connection ended: \(end)") } }
        await connection.close()
    }
}

// MARK: Unread replies

/// Connects a client that reads none of its replies and pipelines `count` `QUERY status` (small enough for the
/// socket's buffer; answers of about 750 bytes each): the daemon stops reading it once the answers pass its bound.
func connectUnreadQuerier(to path: String, name: String, queries count: Int = 2_000) async throws -> TestClient {
    let client = try await TestClient.connect(to: path, name: name)
    try await client.hello()
    try await client.setReading(false)
    var frames = ByteBuffer()
    for index in 1...count {
        ClientFrame.query(requestID: UInt32(index), kind: QueryKind.status.rawValue, argument: "").encode(into: &frames)
    }
    try await client.sendBuffer(frames)
    return client
}
