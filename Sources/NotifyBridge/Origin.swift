import Notify
import NotifyNATS
import NotifyWire

/// Where a bridged notification was first posted: the host, the poster's credentials there, and the daemon's
/// sequence number. It travels as `Notifyd-Origin-*` headers.
package struct Origin: Sendable, Equatable {
    package var host: String
    package var uid: UInt32
    package var gid: UInt32
    package var pid: UInt32
    package var sequence: UInt64
    /// The exporting bridge process's random id (empty from an older bridge).
    package var instance: String
    package var retained: Bool
    /// The exporting bridge's own count of what it published, 1, 2, 3…: a gap means messages lost on the way.
    package var bridgeSequence: UInt64

    package init(
        host: String, uid: UInt32, gid: UInt32, pid: UInt32, sequence: UInt64, instance: String = "",
        retained: Bool = false, bridgeSequence: UInt64 = 0
    ) {
        self.host = host
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.sequence = sequence
        self.instance = instance
        self.retained = retained
        self.bridgeSequence = bridgeSequence
    }

    /// The origin host of a message published by a plain NATS client (one without `Notifyd-Origin-*` headers).
    package static let plainNATSHost = "nats"
    /// The origin given to such a message: remote all the same, with no credentials known.
    package static let plainNATS = Origin(host: plainNATSHost, uid: .max, gid: .max, pid: 0, sequence: 0)

    /// Whether the daemon accepts the host (1 to 255 bytes): it closes a connection that relays another.
    package var hasValidHost: Bool { (1...RelayOrigin.maxHostLength).contains(host.utf8.count) }

    /// The origin a relayed post carries to the local daemon.
    package var notificationOrigin: NotificationOrigin {
        NotificationOrigin(host: host, uid: uid, gid: gid, pid: pid, sequence: sequence)
    }

    package enum Header {
        package static let host = "Notifyd-Origin-Host"
        package static let uid = "Notifyd-Origin-UID"
        package static let gid = "Notifyd-Origin-GID"
        package static let pid = "Notifyd-Origin-PID"
        package static let sequence = "Notifyd-Origin-Seq"
        package static let retained = "Notifyd-Retained"
        package static let bridgeSequence = "Notifyd-Bridge-Seq"
        package static let instance = "Notifyd-Bridge-Instance"
    }

    package var headers: NATSHeaders {
        var headers = NATSHeaders()
        headers.append(Header.host, host)
        headers.append(Header.uid, String(uid))
        headers.append(Header.gid, String(gid))
        headers.append(Header.pid, String(pid))
        headers.append(Header.sequence, String(sequence))
        headers.append(Header.bridgeSequence, String(bridgeSequence))
        if !instance.isEmpty { headers.append(Header.instance, instance) }
        if retained { headers.append(Header.retained, "1") }
        return headers
    }

    /// The origin a message's headers describe, or nil when the host header is missing (not from a bridge).
    package init?(headers: NATSHeaders?) {
        guard let headers, let host = headers[Header.host], !host.isEmpty else { return nil }
        self.host = host
        uid = headers[Header.uid].flatMap { UInt32($0) } ?? UInt32.max
        gid = headers[Header.gid].flatMap { UInt32($0) } ?? UInt32.max
        pid = headers[Header.pid].flatMap { UInt32($0) } ?? 0
        sequence = headers[Header.sequence].flatMap { UInt64($0) } ?? 0
        instance = headers[Header.instance] ?? ""
        retained = headers[Header.retained] == "1"
        bridgeSequence = headers[Header.bridgeSequence].flatMap { UInt64($0) } ?? 0
    }
}
