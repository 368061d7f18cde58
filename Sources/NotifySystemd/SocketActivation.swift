#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSystemd

/// Socket activation (`sd_listen_fds_with_names(3)`): the listening sockets a `.socket` unit or
/// `systemd-socket-activate` passed to this process through `LISTEN_FDS`, `LISTEN_PID` and `LISTEN_FDNAMES`.
package enum SocketActivation {
    /// Takes the sockets passed by the service manager.
    ///
    /// - Parameter unsetEnvironment: remove `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` from the environment,
    ///   so that child processes do not believe the sockets are theirs (the descriptors get `FD_CLOEXEC`).
    /// - Returns: the passed sockets in order, or an empty array when the process was not socket-activated
    ///   (including when `LISTEN_PID` names another process).
    /// - Throws: ``SystemdError/listenDescriptorsUnavailable(errno:)`` when the environment is malformed.
    package static func takeInheritedSockets(unsetEnvironment: Bool = true) throws(SystemdError) -> [InheritedSocket] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(unsetEnvironment ? 1 : 0, &names)
        if count < 0 { throw SystemdError.listenDescriptorsUnavailable(errno: -count) }
        defer {
            if let names {
                for index in 0..<Int(max(count, 0)) { free(names[index]) }
                free(names)
            }
        }
        return (0..<count).map { offset in
            let descriptor = Int32(SD_LISTEN_FDS_START) + offset
            let name = names?[Int(offset)].map { String(cString: $0) } ?? "unknown"
            let isUnixStream = sd_is_socket_unix(descriptor, Int32(SOCK_STREAM.rawValue), 1, nil, 0) > 0
            return InheritedSocket(
                descriptor: descriptor, name: name, path: isUnixStream ? boundPath(of: descriptor) : nil,
                isListeningUnixStream: isUnixStream)
        }
    }

    /// Chooses the socket to serve among those passed: the listening Unix stream socket named `preferredName`
    /// (`FileDescriptorName=`), else the first listening Unix stream socket.
    ///
    /// - Returns: `nil` when `sockets` is empty (not socket-activated).
    /// - Throws: ``SystemdError/noUsableListenSocket(passed:)`` when sockets were passed but none can be served.
    package static func choose(from sockets: [InheritedSocket], preferredName: String) throws(SystemdError)
        -> InheritedSocket?
    {
        guard !sockets.isEmpty else { return nil }
        let usable = sockets.filter(\.isListeningUnixStream)
        guard let first = usable.first else { throw SystemdError.noUsableListenSocket(passed: sockets.count) }
        return usable.first { $0.name == preferredName } ?? first
    }

    /// The path a Unix socket is bound to (`getsockname`), or `nil` for abstract and unnamed sockets.
    static func boundPath(of descriptor: Int32) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard result == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let pathLength = Int(length) - MemoryLayout.offset(of: \sockaddr_un.sun_path)!
        guard pathLength > 0 else { return nil }
        return withUnsafeBytes(of: &address.sun_path) { raw -> String? in
            let bytes = raw.prefix(min(pathLength, raw.count))
            guard let first = bytes.first, first != 0 else { return nil }  // abstract namespace
            return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
    }
}
