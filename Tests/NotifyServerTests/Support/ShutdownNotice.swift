import NIOCore
import NotifyTestSupport
import NotifyWire

extension TestClient {
    /// The range notifyd picks `GOODBYE.reconnect_after_ms` from (`protocol/PROTOCOL.md` § 7.8).
    static let documentedGoodbyeDelays: ClosedRange<UInt32> = 250...1_000

    /// Expects the notice the daemon sends every open connection when it shuts down gracefully, as the next
    /// frame, and returns it.
    ///
    /// The one place that knows what the notice is: `GOODBYE` (0x88, `protocol/PROTOCOL.md` § 7.8) with a
    /// reconnection delay from the documented range and a reason for logs. (It replaced the fatal
    /// `ERROR shutting-down` with request id 0 that earlier daemons sent.)
    @discardableResult
    func expectShutdownNotice(timeout: TimeAmount = defaultTimeout) async throws -> GoodbyeFrame {
        let frame = try await next(timeout: timeout)
        guard case .goodbye(let goodbye) = frame else {
            throw TestFailure("client '\(name)': expected the shutdown notice GOODBYE, got \(frame.summary)")
        }
        let delays = Self.documentedGoodbyeDelays
        guard delays.contains(goodbye.reconnectAfterMilliseconds), !goodbye.reason.isEmpty,
            goodbye.reason.utf8.count <= GoodbyeFrame.maxReasonLength
        else {
            throw TestFailure(
                "client '\(name)': expected GOODBYE with a reconnection delay in \(delays) ms and a reason, got \(frame.summary)")
        }
        return goodbye
    }
}
