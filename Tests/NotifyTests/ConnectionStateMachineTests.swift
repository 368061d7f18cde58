import NotifyWire
import Testing

@testable import Notify

/// The connection's life without a socket: each event goes into the ``ConnectionStateMachine`` and the test
/// checks the action it returns (when to reconnect, what to replay, which waiters to resume or fail).
@Suite("Connection state machine")
struct ConnectionStateMachineTests {
    private struct FakeConnection: Identifiable, Equatable {
        var id: Int
    }

    private typealias Machine = ConnectionStateMachine<FakeConnection, String>

    private static let policy = NotifyCenter.ReconnectPolicy(initialDelay: 0.1, maximumDelay: 0.5)

    private static func welcome(instance: UInt64 = 1, maxPayload: UInt32 = 4_096) -> ServerFrame.Welcome {
        ServerFrame.Welcome(
            daemonPID: 1, instanceID: InstanceID(high: 0, low: instance),
            limits: ServerLimits(maxNameLength: 255, maxPayloadLength: maxPayload, maxFrameLength: 65_536, maxSubscriptions: 100),
            serverName: "test")
    }

    /// Connects `connection` through to `WELCOME`.
    private static func connect(_ machine: inout Machine, _ connection: FakeConnection, instance: UInt64 = 1) -> Machine.Welcomed? {
        let started1 = machine.startConnecting()
        #expect(started1)
        guard case .handshake = machine.connectionEstablished(connection) else {
            Issue.record("no handshake")
            return nil
        }
        return machine.welcome(welcome(instance: instance), on: connection)
    }

    @Test("failed attempts back off, doubling up to the maximum; a WELCOME resets the backoff")
    func backoffGrowsAndResets() {
        var machine = Machine(policy: Self.policy)
        var delays: [Double?] = []
        for _ in 0..<5 {
            let started2 = machine.startConnecting()
            #expect(started2)
            delays.append(machine.connectFailed(reason: "refused")?.reconnectAfter)
        }
        #expect(delays == [0.1, 0.2, 0.4, 0.5, 0.5])
        #expect(machine.lastFailure == "refused")

        let connected3 = Self.connect(&machine, FakeConnection(id: 1))
        #expect(connected3 != nil)
        #expect(machine.lastFailure == nil)
        let lost = machine.connectionClosed(FakeConnection(id: 1), reason: "reset by peer")
        #expect(lost?.reason == "reset by peer")
        #expect(lost?.reconnectAfter == 0.1, "the backoff starts over after a connection that was welcomed")
    }

    @Test("after GOODBYE the first attempt waits as long as the daemon asked, and later ones back off from there")
    func goodbyeDelay() {
        var machine = Machine(policy: Self.policy)
        let connected4 = Self.connect(&machine, FakeConnection(id: 1))
        #expect(connected4 != nil)
        machine.receivedGoodbye(GoodbyeFrame(reconnectAfterMilliseconds: 300, reason: "stopping"))
        let closed = machine.connectionClosed(FakeConnection(id: 1), reason: nil)
        #expect(closed?.reconnectAfter == 0.3)
        #expect(closed?.reason.contains("shutting-down") == true)
        #expect(closed?.reason.contains("reconnecting in 300 ms") == true)
        let started5 = machine.startConnecting()
        #expect(started5)
        let failed6 = machine.connectFailed(reason: "refused")
        #expect(failed6?.reconnectAfter == 0.5, "doubled from the daemon's delay, capped")
    }

    @Test("the socket appearing connects at once between attempts, and retries at once after an attempt it raced")
    func socketAppearing() {
        var machine = Machine(policy: Self.policy)
        let appeared7 = machine.socketAppeared()
        #expect(appeared7 == .none, "idle: the first attempt is already on its way")
        let started8 = machine.startConnecting()
        #expect(started8)
        let appeared9 = machine.socketAppeared()
        #expect(appeared9 == .none)
        let failed10 = machine.connectFailed(reason: "refused")
        #expect(failed10?.reconnectAfter == 0, "the socket appeared during the attempt")
        let appeared11 = machine.socketAppeared()
        #expect(appeared11 == .connectNow)
        let started12 = machine.startConnecting()
        #expect(started12)
        let failed13 = machine.connectFailed(reason: "refused")
        #expect(failed13?.reconnectAfter == 0.1, "back on the backoff")
    }

    @Test("a new connection replays the suspend depth; posting limits follow the phase")
    func replayAfterReconnect() {
        var machine = Machine(policy: Self.policy)
        #expect(machine.postingLimits == nil)
        let started14 = machine.startConnecting()
        #expect(started14)
        let established15 = machine.connectionEstablished(FakeConnection(id: 1))
        #expect(established15 == .handshake(suspendDepth: 0))
        #expect(machine.postingLimits == .default, "the protocol's defaults until WELCOME")
        let welcomed16 = machine.welcome(Self.welcome(maxPayload: 123), on: FakeConnection(id: 1))
        #expect(welcomed16?.daemonRestarted == false)
        #expect(machine.postingLimits?.maxPayloadLength == 123)
        machine.suspended()
        machine.suspended()
        machine.resumed()
        machine.suspended()
        let closed17 = machine.connectionClosed(FakeConnection(id: 1), reason: nil)
        #expect(closed17?.reason == "connection closed by the daemon")
        #expect(machine.postingLimits == nil)
        #expect(machine.connection == nil)

        let started18 = machine.startConnecting()
        #expect(started18)
        let established19 = machine.connectionEstablished(FakeConnection(id: 2))
        #expect(established19 == .handshake(suspendDepth: 2))
        #expect(machine.connection?.id == 2)
        let welcomed20 = machine.welcome(Self.welcome(instance: 2), on: FakeConnection(id: 2))
        #expect(welcomed20?.daemonRestarted == true)
    }

    @Test("waiters: fail-fast ones fail with the attempt, the others are resumed by WELCOME")
    func waiters() {
        var machine = Machine(policy: Self.policy)
        let waiting21 = machine.addWaiter("patient", id: 1, failFast: false)
        #expect(waiting21 == .waiting)
        let waiting22 = machine.addWaiter("hasty", id: 2, failFast: true)
        #expect(waiting22 == .waiting)
        let started23 = machine.startConnecting()
        #expect(started23)
        let failed24 = machine.connectFailed(reason: "refused")
        #expect(failed24?.failing == ["hasty"])
        let waiting25 = machine.addWaiter("late", id: 3, failFast: true)
        #expect(waiting25 == .failed(reason: "refused"))
        let waiting26 = machine.addWaiter("timed out", id: 4, failFast: false)
        #expect(waiting26 == .waiting)
        let removed27 = machine.removeWaiter(id: 4)
        #expect(removed27 == "timed out")
        let removed28 = machine.removeWaiter(id: 4)
        #expect(removed28 == nil)
        let welcomed = Self.connect(&machine, FakeConnection(id: 1))
        #expect(welcomed?.waiters == ["patient"])
        let waiting29 = machine.addWaiter("connected", id: 5, failFast: true)
        #expect(waiting29 == .connected)
    }

    @Test("a connection closed before WELCOME fails the fail-fast waiters; closing fails every waiter")
    func refusedAndClosed() {
        var machine = Machine(policy: Self.policy)
        let waiting30 = machine.addWaiter("patient", id: 1, failFast: false)
        #expect(waiting30 == .waiting)
        let waiting31 = machine.addWaiter("hasty", id: 2, failFast: true)
        #expect(waiting31 == .waiting)
        let started32 = machine.startConnecting()
        #expect(started32)
        let established33 = machine.connectionEstablished(FakeConnection(id: 1))
        #expect(established33 == .handshake(suspendDepth: 0))
        machine.receivedClosingError(ErrorFrame(requestID: 0, rawCode: ErrorCode.quotaExceeded.rawValue, closesConnection: true, message: "too many"))
        let refused = machine.connectionClosed(FakeConnection(id: 1), reason: nil)
        #expect(refused?.failing == ["hasty"])
        #expect(refused?.reason.hasPrefix("daemon closed the connection:") == true)
        let closed = machine.close()
        #expect(closed?.waiters == ["patient"])
        #expect(closed?.connection == nil)
        let closing34 = machine.close()
        #expect(closing34 == nil, "closing twice does nothing")
        let waiting35 = machine.addWaiter("after", id: 3, failFast: false)
        #expect(waiting35 == .closed)
        let started36 = machine.startConnecting()
        #expect(!started36)
    }

    @Test("without reconnection every waiter fails at the first failed attempt, and nothing is scheduled")
    func withoutReconnection() {
        var machine = Machine(policy: .never)
        let waiting37 = machine.addWaiter("patient", id: 1, failFast: false)
        #expect(waiting37 == .waiting)
        let started38 = machine.startConnecting()
        #expect(started38)
        let failed = machine.connectFailed(reason: "refused")
        #expect(failed?.failing == ["patient"])
        #expect(failed != nil && failed?.reconnectAfter == nil)
    }

    @Test("events for another connection than the current one are ignored")
    func staleConnections() {
        var machine = Machine(policy: Self.policy)
        let failed39 = machine.connectFailed(reason: "late")
        #expect(failed39 == nil, "no attempt under way")
        let started40 = machine.startConnecting()
        #expect(started40)
        let started41 = machine.startConnecting()
        #expect(!started41, "one attempt at a time")
        let established42 = machine.connectionEstablished(FakeConnection(id: 1))
        #expect(established42 == .handshake(suspendDepth: 0))
        let welcomed43 = machine.welcome(Self.welcome(), on: FakeConnection(id: 9))
        #expect(welcomed43 == nil)
        let closed44 = machine.connectionClosed(FakeConnection(id: 9), reason: nil)
        #expect(closed44 == nil)
        let welcomed45 = machine.welcome(Self.welcome(), on: FakeConnection(id: 1))
        #expect(welcomed45 != nil)
        let established46 = machine.connectionEstablished(FakeConnection(id: 2))
        #expect(established46 == .close, "not connecting: the extra one is closed")
        #expect(machine.connection?.id == 1)
    }
}

