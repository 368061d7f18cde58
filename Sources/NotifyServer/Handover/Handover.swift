#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CNotifyPosix
import NotifyWire

/// What a daemon that stops hands its successor: the encoded ``HandoverSnapshot`` and the sockets it names (and,
/// without a service manager holding it, the listening socket). The descriptors are this process's duplicates,
/// made before its channels closed their own.
package struct OutgoingHandover: Sendable {
    /// The encoded snapshot.
    package var snapshot: [UInt8]
    /// The client sockets, in no particular order: the successor matches them by cookie.
    package var clientSockets: [CInt]
    /// The listening socket, when no service manager keeps it (`notifyd --replace`).
    package var listener: CInt?
    /// Whether the daemon created the socket file (the successor removes it when it stops for good).
    package var ownsSocketFile: Bool

    /// Creates a hand-over.
    package init(snapshot: [UInt8], clientSockets: [CInt], listener: CInt?, ownsSocketFile: Bool) {
        self.snapshot = snapshot
        self.clientSockets = clientSockets
        self.listener = listener
        self.ownsSocketFile = ownsSocketFile
    }

    /// Closes every descriptor (after they were passed on, or when passing them failed).
    package func closeAll() {
        for descriptor in clientSockets { close(descriptor) }
        if let listener { close(listener) }
    }
}

/// What a starting daemon took over from its predecessor.
package struct IncomingHandover: Sendable {
    /// The snapshot, or why it could not be read (its clients are then sent `GOODBYE`).
    package var snapshot: Result<HandoverSnapshot, HandoverError>
    /// The client sockets passed with it.
    package var clientSockets: [CInt]
    /// Whether the predecessor created the socket file, which this daemon then removes when it stops.
    package var ownsSocketFile: Bool

    /// Creates a taken-over state from the snapshot's bytes.
    package init(snapshotBytes: [UInt8], clientSockets: [CInt], ownsSocketFile: Bool) {
        self.init(snapshot: Self.decode(snapshotBytes), clientSockets: clientSockets, ownsSocketFile: ownsSocketFile)
    }

    /// Creates a taken-over state from a snapshot decoded (or not) already.
    package init(snapshot: Result<HandoverSnapshot, HandoverError>, clientSockets: [CInt], ownsSocketFile: Bool) {
        self.snapshot = snapshot
        self.clientSockets = clientSockets
        self.ownsSocketFile = ownsSocketFile
    }

    /// The snapshot in `bytes`, or why it cannot be read.
    package static func decode(_ bytes: [UInt8]) -> Result<HandoverSnapshot, HandoverError> {
        Result { () throws(HandoverError) in try HandoverSnapshot(decoding: bytes) }
    }
}

/// Where a stopping daemon's state goes: systemd's file descriptor store, or a successor started with
/// `--replace`.
package protocol HandoverSink: Sendable {
    /// Whether to hand over rather than say `GOODBYE` to every client (a restart, not a stop), for `connections`
    /// clients. Asked once the daemon has stopped accepting; may take a while, off the event loop.
    func shouldHandOver(connections: Int) async -> Bool
    /// Passes the state on. On return the successor (or the service manager) holds every descriptor, and the
    /// daemon exits without a word to its clients; on a throw it closes them.
    func deliver(_ handover: OutgoingHandover) async throws
}

/// The snapshot as a sealed memory file (systemd's store keeps descriptors, not bytes), and back.
package enum SnapshotFile {
    /// A memfd holding `bytes`, sealed so nobody can change it.
    package static func make(_ bytes: [UInt8]) -> CInt? {
        let descriptor = bytes.withUnsafeBufferPointer { notifyd_sealed_memfd("notifyd-snapshot", $0.baseAddress, $0.count) }
        return descriptor >= 0 ? descriptor : nil
    }

    /// Everything in the file `descriptor` (read from its start, whoever moved its offset).
    package static func read(_ descriptor: CInt) -> [UInt8]? {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, off_t(result.count)) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { return result }
            result += buffer.prefix(count)
        }
    }
}
