import NIOCore
import NotifyWire

// Requests a caller waits for: barriers, states, suspension, introspection. All go through `request`.
extension CenterCore {
    /// Sends a request carrying a fresh request id (`frame`) and waits for the daemon's answer of the
    /// `expected` kind. `check` vets it against the connection's limits and `onSent` runs once it is queued,
    /// both under the lock.
    ///
    /// Cancelling the calling task stops the wait with `CancellationError` (the request may still take effect in
    /// the daemon), so a caller can bound it against a daemon that never answers. A suspension is not
    /// cancellable: its caller must know whether to `resume()`.
    func request(
        _ expected: Reply.Kind, isSuspension: Bool = false, check: (ServerLimits) throws(NotifyError) -> Void = { _ in },
        onSent: (inout State) -> Void = { _ in }, frame: (UInt32) -> ClientFrame
    ) async throws -> Reply {
        try await waitForConnectionIfConfigured()
        let waiting = WaitingRequest()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Reply, Error>) in
                let outcome = state.withLockedValue { state -> Result<Bool, Error> in
                    if waiting.isCancelled, !isSuspension { return .failure(CancellationError()) }
                    guard state.channel != nil else { return .failure(notConnectedError(state)) }
                    do throws(NotifyError) { try check(state.limits) } catch { return .failure(error) }
                    if let refusal = state.outgoingRefusal(limit: configuration.outgoingLimit) { return .failure(refusal) }
                    let id = state.pending.add(isSuspension ? .suspension(continuation) : .caller(continuation, expecting: expected))
                    waiting.id = id
                    let schedule = state.outbound.append(frame(id))
                    onSent(&state)
                    return .success(schedule)
                }
                switch outcome {
                case .failure(let error): continuation.resume(throwing: error)
                case .success(let schedule): if schedule { scheduleFlush() }
                }
            }
        } onCancel: {
            guard !isSuspension else { return }
            let request = state.withLockedValue { state -> PendingRequests.Request? in
                waiting.isCancelled = true
                return waiting.id.flatMap { state.pending.remove($0) }
            }
            request?.complete(with: .failure(CancellationError()))
        }
    }

    private func waitForConnectionIfConfigured() async throws {
        guard case .wait(let timeout) = configuration.whileDisconnected else { return }
        let connected = state.withLockedValue { $0.channel != nil }
        if !connected { try await waitUntilConnected(failFast: false, timeout: timeout) }
    }

    func synchronize() async throws {
        _ = try await request(.pong) { .ping(requestID: $0) }
    }

    func setState(_ value: UInt64, for name: String) async throws {
        try validate(name)
        _ = try await request(.ok) { .setState(requestID: $0, name: name, value: value) }
    }

    func state(of name: String) async throws -> UInt64? {
        try validate(name)
        guard case .state(let value) = try await request(.state, frame: { .getState(requestID: $0, name: name) }) else {
            preconditionFailure("a pending request resumes with its kind")
        }
        return value
    }

    func suspend() async throws {
        _ = try await request(.ok, isSuspension: true, onSent: { $0.connection.suspended() }) { .suspend(requestID: $0) }
    }

    func resume() async throws {
        let suspended = state.withLockedValue { $0.connection.suspendDepth > 0 }
        guard suspended else { throw NotifyError.rejected(code: .invalidRequest, message: "resume() without a matching suspend()") }
        _ = try await request(.ok, onSent: { $0.connection.resumed() }) { .resume(requestID: $0) }
    }

    func query(_ kind: QueryKind, argument: String) async throws -> ByteBuffer {
        // Lists may be longer than a frame: take them in parts.
        guard kind != .status else { return try await query(rawKind: kind.rawValue, argument: argument) }
        do {
            return try await query(rawKind: kind.rawValue | QueryKind.partsFlag, argument: argument)
        } catch NotifyError.rejected(code: .invalidRequest, let message) where message.hasPrefix("unknown query kind") {
            // A daemon from before answers in parts does not know the flag: ask it the old way.
            return try await query(rawKind: kind.rawValue, argument: argument)
        }
    }

    private func query(rawKind: UInt8, argument: String) async throws -> ByteBuffer {
        let reply = try await request(.queryResult) { .query(requestID: $0, kind: rawKind, argument: argument) }
        guard case .queryResult(let json) = reply else { preconditionFailure("a pending request resumes with its kind") }
        return json
    }
}

/// One request's id once it is sent, and whether its task was cancelled: read and written under the center's lock
/// only (by the request and by its cancellation handler, whichever comes first).
private final class WaitingRequest: @unchecked Sendable {
    var id: UInt32?
    var isCancelled = false
}
