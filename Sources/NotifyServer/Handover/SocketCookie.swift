#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CNotifyPosix
import NIOCore

/// Socket cookies (`SO_COOKIE`): the kernel's number for a socket, the same in every process that holds it. A
/// hand-over matches the sockets it passes to the connections in its snapshot by them, since descriptor numbers
/// change on the way.
enum SocketCookie {
    /// `SO_COOKIE` from `<asm-generic/socket.h>`.
    static let option: Int32 = 57

    /// The cookie of `channel`'s socket; on the channel's event loop, where the query completes at once.
    static func read(from channel: Channel) -> UInt64? {
        guard let provider = channel as? SocketOptionProvider else { return nil }
        let future: EventLoopFuture<UInt64> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(option))
        var result: UInt64?
        future.assumeIsolated().whenSuccess { result = $0 }
        return result
    }

    /// The cookie of the socket `descriptor`, or `nil` if it is not a socket.
    static func read(descriptor: CInt) -> UInt64? {
        var cookie: UInt64 = 0
        return notifyd_socket_cookie(descriptor, &cookie) == 0 ? cookie : nil
    }

    /// This process's open socket descriptors by cookie, listed from `/proc/self/fd` (or, without `/proc`, by
    /// trying every descriptor below `limit`). Called once per hand-over, never on the event loop's hot path.
    static func descriptorsByCookie(limit: CInt) -> [UInt64: CInt] {
        var result: [UInt64: CInt] = [:]
        if let directory = opendir("/proc/self/fd") {
            defer { closedir(directory) }
            // A record is only as long as its name: reading `d_name` as the whole 256-byte field (or `pointee` as a
            // whole `dirent`) runs past the end of the last record in readdir's buffer.
            let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
            while let entry = readdir(directory) {
                let name = String(cString: (UnsafeRawPointer(entry) + nameOffset).assumingMemoryBound(to: CChar.self))
                if let descriptor = CInt(name), let cookie = read(descriptor: descriptor) { result[cookie] = descriptor }
            }
            return result
        }
        for descriptor in 0..<limit {
            if let cookie = read(descriptor: descriptor) { result[cookie] = descriptor }
        }
        return result
    }
}
