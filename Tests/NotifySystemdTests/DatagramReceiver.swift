#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A Unix datagram socket standing in for the service manager's `NOTIFY_SOCKET`.
final class DatagramReceiver {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let path: String
    private let directory: String
    private let descriptor: Int32

    init() throws {
        var template = Array("/tmp/nsd-XXXXXX".utf8CString)
        guard let created = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw Failure(description: "mkdtemp failed")
        }
        directory = String(cString: created)
        path = directory + "/notify.sock"
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { [path] raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard descriptor >= 0, bound == 0 else { throw Failure(description: "cannot bind \(path)") }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The next datagram as text; fails after 10 s without one.
    func receive() throws -> String {
        var buffer = [UInt8](repeating: 0, count: 4_096)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        guard count >= 0 else { throw Failure(description: "no datagram within 10 s (errno \(errno))") }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    func close() {
        Glibc.close(descriptor)
        unlink(path)
        rmdir(directory)
    }
}
