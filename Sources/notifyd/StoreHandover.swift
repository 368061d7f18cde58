#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import NotifyServer
import NotifySystemd

/// The hand-over under systemd: on a restart job the daemon's snapshot (a sealed memfd) and its client sockets go
/// into the service's file descriptor store, and the next process takes them from `LISTEN_FDS`; on a stop job
/// (or when the store is too small, or the bus cannot be asked) every client gets its `GOODBYE` as before.
struct StoreHandover: HandoverSink {
    /// The names the entries are stored under: parcels of client sockets (``DescriptorParcel``) and the snapshot.
    /// A daemon before parcels stored each client socket as its own entry, under `notifyd-client`; its successor
    /// still takes those.
    static let parcelName = "notifyd-parcel"
    static let clientName = "notifyd-client"
    static let snapshotName = "notifyd-snapshot"

    let logger: Logger
    /// The socket's path, next to which `notifyd --announce-stop` leaves its answer (see ``StopAnnouncement``).
    let socketPath: String?

    func shouldHandOver(connections: Int) async -> Bool {
        let storeMax: UInt32
        switch socketPath.flatMap({ StopAnnouncement.answer(socketPath: $0, pid: getpid()) }) {
        case .stop:
            logger.info("stopping (not a restart): clients are sent GOODBYE")
            return false
        case .restart(let announced):
            storeMax = announced
        case nil:
            // No announcement (a unit without the ExecStop= line, or it failed): ask on the bus.
            let environment = ProcessEnvironment.current
            let job: Result<ServiceJob, SystemdError> = await Self.offThread {
                Result { () throws(SystemdError) in
                    try ServiceJob.of(pid: getpid(), on: environment["MANAGERPID"] != nil ? .user : .system)
                }
            }
            switch job {
            case .failure(let error):
                logger.notice("stopping without a hand-over: \(error.description)")
                return false
            case .success(let job):
                guard job.isRestart else {
                    logger.info("stopping (not a restart): clients are sent GOODBYE", metadata: ["job": "\(job.type ?? "none")"])
                    return false
                }
                storeMax = job.fileDescriptorStoreMax
            }
        }
        // At most two entries (a parcel's ends) per message of client sockets, and the snapshot.
        let messages = (connections + DescriptorParcel.descriptorsPerMessage - 1) / DescriptorParcel.descriptorsPerMessage
        guard Int(storeMax) >= 2 * messages + 1 else {
            logger.warning(
                "restarting without a hand-over: FileDescriptorStoreMax= is too small for the connections",
                metadata: ["connections": "\(connections)", "FileDescriptorStoreMax": "\(storeMax)"])
            return false
        }
        logger.notice("restarting: handing the connections to the next process", metadata: ["connections": "\(connections)"])
        return true
    }

    func deliver(_ handover: OutgoingHandover) async throws {
        guard let snapshot = SnapshotFile.make(handover.snapshot) else {
            throw SystemdError.fileDescriptorStoreFailed(errno: errno)
        }
        defer { close(snapshot) }
        let parcels = try DescriptorParcel.pack(handover.clientSockets)
        defer { for parcel in parcels { close(parcel) } }
        let stored: Result<Void, SystemdError> = await Self.offThread {
            Result { () throws(SystemdError) in
                try FileDescriptorStore.store(parcels, name: Self.parcelName)
                try FileDescriptorStore.store([snapshot], name: Self.snapshotName)
            }
        }
        try stored.get()
    }

    /// Sets apart the sockets a predecessor left in the store (`ours`) from the others passed.
    static func partition(_ inherited: [InheritedSocket]) -> (ours: [InheritedSocket], rest: [InheritedSocket]) {
        let names = [parcelName, clientName, snapshotName]
        return (inherited.filter { names.contains($0.name) }, inherited.filter { !names.contains($0.name) })
    }

    /// Takes what a predecessor stored from the sockets systemd passed, leaving the others (the listening socket).
    static func take(from inherited: [InheritedSocket], logger: Logger) -> (IncomingHandover?, rest: [InheritedSocket]) {
        let ours = [parcelName, clientName, snapshotName]
        let parcels = inherited.filter { $0.name == parcelName }.map(\.descriptor)
        let snapshots = inherited.filter { $0.name == snapshotName }.map(\.descriptor)
        let rest = inherited.filter { !ours.contains($0.name) }
        guard inherited.count > rest.count else { return (nil, rest) }
        defer { for descriptor in snapshots { close(descriptor) } }
        let snapshot: Result<HandoverSnapshot, HandoverError>
        if snapshots.count == 1, let bytes = SnapshotFile.read(snapshots[0]) {
            snapshot = IncomingHandover.decode(bytes)
        } else {
            logger.error("the file descriptor store holds \(snapshots.count) snapshots; expected one")
            snapshot = .failure(.malformed("\(snapshots.count) snapshots stored"))
        }
        // The snapshot names the connections: room for their sockets is made before they arrive.
        if let parcel = parcels.first, case .success(let decoded) = snapshot {
            DescriptorTable.reserve(decoded.peers.count, probingWith: parcel)
        }
        let (unpacked, failure) = DescriptorParcel.unpack(parcels)
        if let failure { logger.error("\(failure): the connections in it are lost") }
        let clients = unpacked + inherited.filter { $0.name == clientName }.map(\.descriptor)
        return (IncomingHandover(snapshot: snapshot, clientSockets: clients, ownsSocketFile: false), rest)
    }

    /// Empties the store once the new process serves everything it held.
    static func removeStored() {
        FileDescriptorStore.remove(name: parcelName)
        FileDescriptorStore.remove(name: clientName)
        FileDescriptorStore.remove(name: snapshotName)
    }

    /// Runs blocking libsystemd calls on a thread of their own.
    private static func offThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: body()) }
            thread.start()
        }
    }
}
