#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Minimal blocking POSIX Unix-domain stream socket, for readiness checks and raw-protocol tests.
struct UnixSocket: ~Copyable {
    let descriptor: Int32

    /// Connects to `path`.
    init(connectingTo path: String) throws {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw HarnessError("socket() failed: \(Self.lastError())") }
        guard Self.connectSocket(descriptor, path) else {
            let error = Self.lastError()
            close(descriptor)
            throw HarnessError("cannot connect to \(path): \(error)")
        }
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }

    /// Makes `receive` give up after `seconds` without data.
    func setReceiveTimeout(seconds: Int) throws {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        let result = setsockopt(
            descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard result == 0 else { throw HarnessError("setsockopt(SO_RCVTIMEO) failed: \(Self.lastError())") }
    }

    /// Writes all of `bytes`.
    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                throw HarnessError("write failed: \(Self.lastError())")
            }
            offset += written
        }
    }

    /// Reads what is available; an empty result means end-of-file.
    ///
    /// - Throws: when the receive timeout passes without data, or on a read error.
    func receive() throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count >= 0 { return Array(buffer[0..<count]) }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { throw HarnessError("no data from the daemon within the receive timeout") }
            throw HarnessError("read failed: \(Self.lastError())")
        }
    }

    // MARK: Path checks

    /// Whether something accepts connections at `path` right now.
    static func acceptsConnections(at path: String) -> Bool {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return connectSocket(descriptor, path)
    }

    /// Whether a file (of any type) exists at `path`, without following symbolic links.
    static func fileExists(at path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// Whether a socket file exists at `path`.
    static func socketFileExists(at path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFSOCK
    }

    private static func connectSocket(_ descriptor: Int32, _ path: String) -> Bool {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        precondition(path.utf8.count < capacity, "socket path too long: \(path)")
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return result == 0
    }

    private static func lastError() -> String { String(cString: strerror(errno)) }
}
