#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOCore

/// Reads the kernel-verified credentials of the process at the other end of a Unix socket: the daemon reads its
/// clients', the library its daemon's (for a listening socket, those of the process that called `listen`).
package enum PeerCredentials {
    /// The layout of Linux's `struct ucred` (three 32-bit fields, 12 bytes). Glibc only exports the C struct
    /// with `_GNU_SOURCE`, which Swift's importer does not set, so it is declared here.
    struct UCred: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// `SO_PEERCRED` from `<asm-generic/socket.h>`.
    static let peerCredentialsOption: Int32 = 17

    /// The credentials of `channel`'s peer, or `nil` if the channel is not a Unix socket NIO can query.
    ///
    /// Must be called on the channel's event loop, where the query completes synchronously.
    package static func read(from channel: Channel) -> SenderCredentials? {
        channel.eventLoop.preconditionInEventLoop()
        guard let provider = channel as? SocketOptionProvider else { return nil }
        let future: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(peerCredentialsOption))
        var result: SenderCredentials?
        future.assumeIsolated().whenSuccess { credentials in
            result = SenderCredentials(pid: UInt32(bitPattern: credentials.pid), uid: credentials.uid, gid: credentials.gid)
        }
        return result
    }
}
