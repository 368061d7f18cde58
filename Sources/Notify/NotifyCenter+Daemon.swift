import Foundation
import NIOCore
import NotifyWire

extension NotifyCenter {
    /// Sets the state value of `name`, readable by anyone with ``state(of:)`` without subscribing.
    ///
    /// States live in the daemon until it exits; they are not notifications (setting one does not post).
    ///
    /// - Throws: ``NotifyError/rejected(code:message:)`` with `permission-denied` under a name the caller may
    ///   not post (such as another user's `user.<uid>.` names), or `quota-exceeded`.
    public func setState(_ value: UInt64, for name: String) async throws {
        try await core.setState(value, for: name)
    }

    /// The state value of `name`, or `nil` if none was ever set.
    public func state(of name: String) async throws -> UInt64? {
        try await core.state(of: name)
    }

    /// Holds this center's notifications in the daemon under each observation's policy until the matching
    /// ``resume()``. Nestable, like `notify_suspend`: only the last `resume()` releases them.
    public func suspend() async throws {
        try await core.suspend()
    }

    /// Undoes one ``suspend()``.
    ///
    /// - Throws: ``NotifyError/rejected(code:message:)`` with `invalid-request` without a matching `suspend()`.
    public func resume() async throws {
        try await core.resume()
    }

    /// The daemon's figures: version, instance, uptime, connections, subscriptions, rates, losses, memory.
    public func daemonStatus() async throws -> DaemonStatus {
        try decode(DaemonStatus.self, try await core.query(.status, argument: ""))
    }

    /// The names the daemon knows (with subscribers, state or a retained notification), optionally only those
    /// matching `pattern`.
    public func daemonNames(matching pattern: String? = nil) async throws -> [DaemonName] {
        try decode([DaemonName].self, try await core.query(.names, argument: pattern ?? ""))
    }

    /// The clients connected to the daemon: all of them for root, the caller's own user's otherwise.
    ///
    /// A client's `command` is the daemon's reading of `/proc/PID/comm`, made in batches on a 50 ms tick for the
    /// connections still open then (so usually within 50 ms of connecting; longer after a flood of connections);
    /// where the daemon has not read it yet, or its sandbox hides it (the shipped unit's `ProtectProc=invisible`),
    /// it is read by this process instead, as seen from its pid namespace.
    public func daemonClients() async throws -> [DaemonClient] {
        var clients = try decode([DaemonClient].self, try await core.query(.clients, argument: ""))
        // A sandboxed daemon (ProtectProc=invisible) cannot read other users' commands; this process may.
        for index in clients.indices where clients[index].command == nil {
            clients[index].command = ProcessCommand.name(of: clients[index].pid)
        }
        return clients
    }

    private func decode<T: Decodable>(_ type: T.Type, _ json: ByteBuffer) throws -> T {
        try JSONDecoder().decode(type, from: Data(json.readableBytesView))
    }
}
