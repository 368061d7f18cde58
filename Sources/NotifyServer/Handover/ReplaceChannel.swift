#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CNotifyPosix
import NIOConcurrencyHelpers

/// `notifyd --replace` without a service manager: the running daemon listens on a control socket next to its
/// socket (``controlPath(for:)``, mode 0600, its own user or root only); a new daemon connects, asks, and receives
/// the snapshot and every socket with `SCM_RIGHTS`, then answers that it has taken them (`protocol/PROTOCOL.md`
/// § 15.3 has the exchange). Blocking calls on a thread of its own, never on the event loop.
package enum ReplaceChannel {
    /// The control socket of the daemon listening at `socketPath`.
    package static func controlPath(for socketPath: String) -> String { socketPath + ".replace" }

    static let request = Array("NOTIFYD-REPLACE 1\n".utf8)
    static let taken = Array("TAKEN\n".utf8)
    /// Header flags.
    static let hasListener: UInt8 = 1
    static let ownsSocketFile: UInt8 = 2

    /// Why a replacement failed.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        init(_ description: String) { self.description = description }
        static func system(_ what: String) -> Failure { Failure("\(what): \(String(cString: strerror(errno)))") }
    }

    // MARK: The new daemon's side

    /// Asks the daemon whose control socket is at `controlPath` for its state and sockets.
    ///
    /// - Returns: the hand-over and the listening socket, or `nil` when no daemon listens there (nothing to
    ///   replace: the caller starts afresh).
    package static func takeOver(controlPath: String) throws(Failure) -> (IncomingHandover, listener: CInt)? {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw .system("socket") }
        defer { close(descriptor) }
        let connected = withSocketAddress(controlPath) { connect(descriptor, $0, $1) }
        guard let connected else { throw Failure("control socket path too long: \(controlPath)") }
        if connected != 0 {
            if errno == ENOENT || errno == ECONNREFUSED { return nil }
            throw .system("cannot reach the running daemon at \(controlPath)")
        }
        // The daemon answering must be this user's (or root's): anything else would be handing this daemon
        // someone else's idea of its clients.
        guard let owner = peerUID(descriptor), owner == geteuid() || owner == 0 else {
            throw Failure("the process at \(controlPath) runs as another user; not taking anything from it")
        }
        // No timeout on the answer: the running daemon sends its header only once it has stopped serving and
        // captured every connection, and a successor that gave up then would leave no daemon at all.
        try writeAll(descriptor, request)
        var stream = Stream(descriptor: descriptor)
        let (header, headerDescriptors) = try stream.read(count: 10)
        if header.first == UInt8(ascii: "D") {
            let reason = String(decoding: header.dropFirst() + (try stream.readToEnd()), as: UTF8.self)
            throw Failure("the running daemon refused: \(reason.filter { $0 != "\n" })")
        }
        guard header.first == UInt8(ascii: "H") else { throw Failure("unexpected answer from the running daemon") }
        let flags = header[1]
        let snapshotLength = Int(header[2...5].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        let clientCount = Int(header[6...9].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        guard flags & hasListener != 0, headerDescriptors.count == 1 else {
            for descriptor in headerDescriptors { close(descriptor) }
            throw Failure("the running daemon did not pass its listening socket")
        }
        let listener = headerDescriptors[0]
        var clients: [CInt] = []
        do throws(Failure) {
            let (snapshot, _) = try stream.read(count: snapshotLength)
            DescriptorTable.reserve(clientCount, probingWith: listener)
            while true {
                let (tag, passed) = try stream.read(count: 1)
                clients += passed
                if tag[0] == UInt8(ascii: "E") { break }
                guard tag[0] == UInt8(ascii: "C") else { throw Failure("unexpected message from the running daemon") }
            }
            guard clients.count == clientCount else {
                throw Failure("the running daemon announced \(clientCount) connections and passed \(clients.count)")
            }
            try writeAll(descriptor, taken)
            let handover = IncomingHandover(
                snapshotBytes: snapshot, clientSockets: clients, ownsSocketFile: flags & ownsSocketFile != 0)
            return (handover, listener)
        } catch {
            for client in clients { close(client) }
            close(listener)
            throw error
        }
    }

    // MARK: The running daemon's side

    /// Answers a request on `descriptor` (a connection to the control socket) by passing `handover`, and waits
    /// for the successor to say it took everything.
    static func deliver(_ handover: OutgoingHandover, on descriptor: CInt) throws(Failure) {
        guard let listener = handover.listener else { throw Failure("no listening socket to pass") }
        var header: [UInt8] = [UInt8(ascii: "H"), hasListener | (handover.ownsSocketFile ? ownsSocketFile : 0)]
        for value in [UInt32(handover.snapshot.count), UInt32(handover.clientSockets.count)] {
            withUnsafeBytes(of: value.bigEndian) { header += $0 }
        }
        try send(descriptor, header, descriptors: [listener])
        try writeAll(descriptor, handover.snapshot)
        var start = 0
        while start < handover.clientSockets.count {
            let batch = Array(handover.clientSockets[start..<min(start + DescriptorParcel.descriptorsPerMessage, handover.clientSockets.count)])
            try send(descriptor, [UInt8(ascii: "C")], descriptors: batch)
            start += batch.count
        }
        try send(descriptor, [UInt8(ascii: "E")], descriptors: [])
        var stream = Stream(descriptor: descriptor)
        guard (try? stream.read(count: taken.count).0) == taken else {
            throw Failure("the new daemon did not confirm that it took the connections")
        }
    }

    /// Refuses a request with a reason the new daemon prints.
    static func refuse(_ reason: String, on descriptor: CInt) {
        try? writeAll(descriptor, Array(("D" + reason + "\n").utf8))
    }

    // MARK: Plumbing

    /// The uid of the process at the other end of a Unix socket (`SO_PEERCRED`).
    static func peerUID(_ descriptor: CInt) -> UInt32? {
        var credentials = (pid: Int32(0), uid: UInt32(0), gid: UInt32(0))
        var length = socklen_t(MemoryLayout.size(ofValue: credentials))
        guard getsockopt(descriptor, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else { return nil }
        return credentials.uid
    }

    private static func send(_ descriptor: CInt, _ bytes: [UInt8], descriptors: [CInt]) throws(Failure) {
        let sent = bytes.withUnsafeBufferPointer { data in
            descriptors.withUnsafeBufferPointer { fds in
                notifyd_send_with_fds(descriptor, data.baseAddress, data.count, fds.baseAddress, fds.count)
            }
        }
        guard sent == bytes.count else { throw .system("cannot send to the other daemon") }
    }

    static func writeAll(_ descriptor: CInt, _ bytes: [UInt8]) throws(Failure) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                throw .system("cannot write to the other daemon")
            }
            offset += written
        }
    }

    /// Binds `path` as a `sockaddr_un` for `body`; `nil` if the path is too long.
    static func withSocketAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> CInt) -> CInt? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Reads exact byte counts from a stream socket, collecting the descriptors that come with them.
    struct Stream {
        let descriptor: CInt

        mutating func read(count: Int) throws(Failure) -> ([UInt8], [CInt]) {
            var bytes = [UInt8](repeating: 0, count: count)
            var descriptors: [CInt] = []
            var filled = 0
            var passed = [CInt](repeating: -1, count: DescriptorParcel.descriptorsPerMessage)
            while filled < count {
                var passedCount = 0
                let received = bytes.withUnsafeMutableBufferPointer { buffer in
                    passed.withUnsafeMutableBufferPointer { fds in
                        notifyd_receive_with_fds(
                            descriptor, buffer.baseAddress! + filled, count - filled, fds.baseAddress, fds.count,
                            &passedCount)
                    }
                }
                descriptors += passed.prefix(passedCount)
                if received < 0 {
                    for passed in descriptors { close(passed) }
                    throw .system("cannot read from the other daemon")
                }
                if received == 0 {
                    for passed in descriptors { close(passed) }
                    throw Failure("the other daemon closed the control connection early")
                }
                filled += received
            }
            return (bytes, descriptors)
        }

        mutating func readToEnd() throws(Failure) -> [UInt8] {
            var result: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 512)
            while true {
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                if count <= 0 { return result }
                result += buffer.prefix(count)
            }
        }
    }
}
