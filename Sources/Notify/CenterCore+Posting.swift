import NIOCore
import NotifyWire

// Posting, holding posts while disconnected, and the flush loop that writes every appended frame.
extension CenterCore {
    /// Posts without waiting, encoding straight from the caller's bytes into the outgoing buffer.
    func post(
        _ name: String, payload: UnsafeRawBufferPointer, retain: Bool = false, origin: RelayOrigin? = nil
    ) throws(NotifyError) {
        if NotificationName.isProcessLocal(name) {
            try validate(name)
            postLocally(name, payload: payload)
            return
        }
        let outcome = state.withLockedValue { state -> Result<Bool, NotifyError> in
            do throws(NotifyError) {
                // Posters usually repeat a name: it is checked against the grammar once, not on every post.
                if state.lastPostedName != ExactName(name) {
                    try validate(name)
                    state.lastPostedName = ExactName(name)
                }
                try checkPayload(size: payload.count, state.limits)
                if let origin {
                    // What the daemon checks for a relayed post (PROTOCOL.md § 16.1): its largest frame, the
                    // NOTIFICATION_MERGED with the origin, within the frame limit.
                    let frame = origin.largestFrameLength(nameByteCount: name.utf8.count, payloadByteCount: payload.count)
                    if frame > Int(state.limits.maxFrameLength) {
                        throw NotifyError.payloadTooLarge(
                            size: payload.count, limit: payload.count - (frame - Int(state.limits.maxFrameLength)))
                    }
                }
            } catch {
                return .failure(error)
            }
            guard state.connection.postingLimits != nil else {
                return holdLocked(name, ByteBuffer(bytes: payload), retain: retain, origin: origin, &state)
            }
            if let refusal = state.outgoingRefusal(limit: configuration.outgoingLimit) { return .failure(refusal) }
            if let origin {
                return .success(
                    state.outbound.appendUnacknowledgedPost(
                        name: name, payload: ByteBuffer(bytes: payload), retain: retain, origin: origin))
            }
            return .success(state.outbound.appendPost(name: name, payload: payload, retain: retain))
        }
        if try outcome.get() { scheduleFlush() }
    }

    func postAcknowledged(_ name: String, payload: ByteBuffer, retain: Bool = false) async throws -> PostReceipt {
        try validate(name)
        if NotificationName.isProcessLocal(name) {
            let delivered = payload.withUnsafeReadableBytes { postLocally(name, payload: $0) }
            return PostReceipt(sequence: 0, deliveredCount: delivered > 0 ? 1 : 0)
        }
        let reply = try await request(.posted, check: { limits throws(NotifyError) in
            try checkPayload(size: payload.readableBytes, limits)
        }) {
            .post(.init(requestID: $0, flags: retain ? [.ackWanted, .retain] : .ackWanted, name: name, payload: payload))
        }
        guard case .posted(let receipt) = reply else { preconditionFailure("a pending request resumes with its kind") }
        return receipt
    }

    func checkPayload(size: Int, _ limits: ServerLimits) throws(NotifyError) {
        if size > Int(limits.maxPayloadLength) {
            throw NotifyError.payloadTooLarge(size: size, limit: Int(limits.maxPayloadLength))
        }
    }

    /// Keeps a post made while disconnected, if the configuration says to wait.
    private func holdLocked(
        _ name: String, _ payload: ByteBuffer, retain: Bool, origin: RelayOrigin?, _ state: inout State
    ) -> Result<Bool, NotifyError> {
        guard case .wait(let timeout) = configuration.whileDisconnected, !state.connection.isClosed else {
            return .failure(notConnectedError(state))
        }
        let deadline = NIODeadline.now() + .seconds(saturating: timeout)
        switch state.held.hold(.init(deadline: deadline, name: name, payload: payload, retain: retain, origin: origin)) {
        case .full: return .failure(notConnectedError(state))
        case .held: break
        case .scheduleExpiry(let deadline): eventLoop.scheduleTask(deadline: deadline) { self.expireHeldPosts() }
        }
        return .success(false)
    }

    private func expireHeldPosts() {
        let (expired, next) = state.withLockedValue { $0.held.expire(now: .now()) }
        if let next { eventLoop.scheduleTask(deadline: next) { self.expireHeldPosts() } }
        if expired > 0 {
            logger.warning("posts made while disconnected expired", metadata: ["count": "\(expired)"])
            emit(.postsExpired(count: expired))
        }
    }

    // MARK: Flushing

    func scheduleFlush() {
        eventLoop.execute { self.flushOutgoing() }
    }

    /// Flush rounds in one turn of the I/O thread before it lets other work run (see ``flushOutgoing()``).
    private static let maxFlushRounds = 16

    /// Writes what was appended, and keeps writing while posters go on appending during its writes (up to
    /// ``maxFlushRounds``): a steady poster's frames then go out in batches as large as one write takes to
    /// make, without a wake-up of the I/O thread per batch. The flush stays scheduled until a round finds
    /// nothing, which tells posters that their frames will be picked up.
    func flushOutgoing() {
        var capacity = 4_096
        for _ in 0..<Self.maxFlushRounds {
            // Allocated before taking the lock, which posters wait on.
            var bytes = allocator.buffer(capacity: capacity)
            let channel = state.withLockedValue { state -> Channel? in
                // A channel whose socket does not take more (the daemon is not reading) is not written to: the
                // bytes wait here, bounded (`outgoingLimit`), until it is writable again (`writabilityChanged`).
                guard let channel = state.channel else {
                    _ = state.outbound.take(swappingIn: &bytes, canWrite: false)
                    return nil
                }
                guard channel.isWritable else { return nil }
                return state.outbound.take(swappingIn: &bytes, canWrite: true) ? channel : nil
            }
            guard let channel else { return }
            capacity = min(max(bytes.readableBytes, 256), 65_536)
            channel.writeAndFlush(bytes, promise: nil)
        }
        // Posters are still appending: other events on this loop go first, then the next round.
        scheduleFlush()
    }
}
