#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifyTestSupport

/// What is at a socket path.
enum UnixSocket {
    /// Whether something accepts connections at `path` right now.
    static func acceptsConnections(at path: String) -> Bool {
        UnixSocketAddress.acceptsConnections(at: path)
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
}
