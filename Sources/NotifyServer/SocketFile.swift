#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Prepares the filesystem for a listening Unix socket.
enum SocketFile {
    /// Which file is at a path: its device and inode.
    struct Identity: Equatable, Sendable {
        var device: UInt64
        var inode: UInt64
    }

    /// The identity of the file at `path` now (`nil`: nothing there).
    static func identity(at path: String) -> Identity? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return Identity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Removes the socket at `path` if it is still the one this daemon made (`identity`): a daemon started later
    /// at the same path (after the directory was wiped at logout, say) keeps its own.
    static func remove(_ path: String, ifStill identity: Identity?) {
        guard let identity, Self.identity(at: path) == identity else { return }
        _ = unlink(path)
    }

    /// Creates the socket's directory if needed and removes a stale socket file left by a daemon that died,
    /// but refuses to touch a socket a live daemon still accepts connections on, or a file that is not a socket.
    ///
    /// - Parameter directoryMode: permission bits for a directory this creates.
    static func prepare(path: String, directoryMode: mode_t = 0o755) throws {
        guard path.utf8.count < 108 else {
            throw ServerError.socketSetupFailed(path: path, reason: "the path is longer than the 107 bytes a Unix socket address holds")
        }
        try createDirectories(for: path, mode: directoryMode)
        try checkDirectoryIsTrusted(for: path)
        var info = stat()
        guard lstat(path, &info) == 0 else { return }  // nothing there
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw ServerError.socketSetupFailed(path: path, reason: "a file that is not a socket is in the way")
        }
        if isAcceptingConnections(path) { throw ServerError.alreadyRunning(path: path) }
        guard unlink(path) == 0 || errno == ENOENT else {
            throw ServerError.socketSetupFailed(path: path, reason: "cannot remove the stale socket: \(errnoDescription())")
        }
    }

    /// A new Unix stream socket bound at `path` and listening (close-on-exec).
    ///
    /// It listens before it is moved into place: a client that sees the path appear (the library watches for
    /// it) and connects at once must not be refused.
    ///
    /// - Parameter reportedAs: the path named in errors (the final path when binding in a staging directory).
    static func bindSocket(path: String, reportedAs: String, backlog: CInt) throws -> CInt {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else {
            throw ServerError.socketSetupFailed(path: reportedAs, reason: "socket() failed: \(errnoDescription())")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(descriptor)
            throw ServerError.socketSetupFailed(path: reportedAs, reason: "the path is longer than the 107 bytes a Unix socket address holds")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0, listen(descriptor, backlog) == 0 else {
            let reason = "\(bound == 0 ? "listen" : "bind") failed: \(errnoDescription())"
            close(descriptor)
            throw ServerError.socketSetupFailed(path: reportedAs, reason: reason)
        }
        return descriptor
    }

    /// A private directory next to `path` (mode 0700, on the same filesystem) to bind the socket in before
    /// moving it to `path`, or `nil` when its longer path would not fit in a socket address.
    ///
    /// The socket file then has its final mode from the moment it is reachable at `path`: bound there directly,
    /// it accepted connections under the umask's mode until `chmod` ran (refusing users the mode lets in, or,
    /// with a permissive umask, letting in users it does not). Changing the umask instead would affect the
    /// whole process.
    static func makeStagingDirectory(for path: String) throws -> String? {
        // "/run/notifyd.sock" → "/run", "/notifyd.sock" → "" (the root), "notifyd.sock" → ".".
        let parent = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let template = parent + "/.notifyd-XXXXXX"
        guard template.utf8.count + 2 < 108 else { return nil }  // + "/s"
        var bytes = Array(template.utf8CString)
        let created = bytes.withUnsafeMutableBufferPointer { buffer in
            mkdtemp(buffer.baseAddress!).map { String(cString: $0) }
        }
        guard let created else {
            throw ServerError.socketSetupFailed(path: path, reason: "cannot create a directory to bind in: \(errnoDescription())")
        }
        return created
    }

    /// Refuses a socket directory another user could have prepared to receive this daemon's clients: it must be
    /// a real directory (not a symbolic link), owned by this user or root, and writable by no one else unless
    /// it is sticky and root's (as `/tmp` is). ssh-agent, tmux and systemd check the same before trusting one.
    static func checkDirectoryIsTrusted(for path: String) throws {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) }.map { $0.isEmpty ? "/" : $0 } ?? "."
        var info = stat()
        guard lstat(directory, &info) == 0 else {
            throw ServerError.socketSetupFailed(path: path, reason: "cannot inspect \(directory): \(errnoDescription())")
        }
        let refuse = { (why: String) in
            ServerError.socketSetupFailed(
                path: path,
                reason: "\(directory) \(why): another user could receive your clients' notifications there; "
                    + "remove it, or choose another --socket")
        }
        if info.st_mode & S_IFMT == S_IFLNK { throw refuse("is a symbolic link") }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw refuse("is not a directory") }
        let me = geteuid()
        guard info.st_uid == me || info.st_uid == 0 else {
            throw refuse("belongs to uid \(info.st_uid), not to you (uid \(me))")
        }
        let writableByOthers = info.st_mode & (S_IWGRP | S_IWOTH) != 0
        let isStickyRootDirectory = info.st_mode & S_ISVTX != 0 && info.st_uid == 0
        if writableByOthers && !isStickyRootDirectory {
            throw refuse("can be written by other users (mode \(String(info.st_mode & 0o7777, radix: 8)))")
        }
    }

    private static func createDirectories(for path: String, mode: mode_t) throws {
        var components = path.split(separator: "/", omittingEmptySubsequences: false).dropLast()
        guard !components.isEmpty else { return }
        var current = components.removeFirst().isEmpty ? "" : "."
        for component in components where !component.isEmpty {
            current += "/" + component
            if mkdir(current, mode) != 0 && errno != EEXIST {
                throw ServerError.socketSetupFailed(path: path, reason: "cannot create directory \(current): \(errnoDescription())")
            }
        }
    }

    /// Whether something accepts connections at `path` right now.
    static func isAcceptingConnections(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() where index < raw.count - 1 { raw[index] = byte }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return result == 0
    }

    static func errnoDescription() -> String { String(cString: strerror(errno)) }
}
