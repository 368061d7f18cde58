#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// The uid and gid a test client connects with. The ids below are not in `/etc/passwd`, so the daemon knows
/// no supplementary groups for them: the primary gid is the only group.
package struct PeerIdentity: Sendable, Hashable, CustomStringConvertible {
    package var uid: UInt32
    package var gid: UInt32

    package init(uid: UInt32, gid: UInt32) { (self.uid, self.gid) = (uid, gid) }

    package static let root = PeerIdentity(uid: 0, gid: 0)
    package static let alice = PeerIdentity(uid: 4201, gid: 4301)
    package static let bob = PeerIdentity(uid: 4202, gid: 4302)
    /// Primary group 4300, the group of the `group=4300` rules in the access tests.
    package static let carol = PeerIdentity(uid: 4203, gid: 4300)

    package var description: String { "uid \(uid)/gid \(gid)" }
}

/// Runs code with other effective ids on the calling thread only, to connect Unix sockets as another user.
///
/// The raw `setresuid`/`setresgid` system calls change the credentials of the calling thread alone (glibc's
/// wrappers would change every thread of the process), and `connect(2)` records the connecting thread's
/// effective ids as the socket's peer credentials (what the daemon reads with `SO_PEERCRED`). The real and saved
/// ids stay 0, so the thread switches back to root afterwards.
package enum CredentialSwitch {
    #if arch(x86_64)
    private static let setresuidNumber = 117
    private static let setresgidNumber = 119
    #elseif arch(arm64)
    private static let setresuidNumber = 147
    private static let setresgidNumber = 149
    #endif

    private typealias RawSyscall = @convention(c) (Int, Int, Int, Int) -> Int

    /// Runs `body` on the calling thread with the effective ids of `identity` (root runs it unchanged). Call it
    /// on a thread of its own (``connect(to:as:receiveBufferSize:)`` does): no other code may run on the thread
    /// meanwhile.
    package static func with<T>(_ identity: PeerIdentity, _ body: () throws -> T) throws -> T {
        if identity == .root { return try body() }
        guard geteuid() == 0 else { throw TestFailure("the tests must run as root to connect as \(identity)") }
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "syscall") else {
            throw TestFailure("cannot find syscall(2) in the process")
        }
        let rawSyscall = unsafeBitCast(symbol, to: RawSyscall.self)
        // The group first, while the thread may still change it; -1 leaves the real and saved ids (root) alone.
        guard rawSyscall(setresgidNumber, -1, Int(identity.gid), -1) == 0 else {
            throw TestFailure("setresgid(\(identity.gid)) failed: errno \(errno)")
        }
        guard rawSyscall(setresuidNumber, -1, Int(identity.uid), -1) == 0 else {
            _ = rawSyscall(setresgidNumber, -1, 0, -1)
            throw TestFailure("setresuid(\(identity.uid)) failed: errno \(errno)")
        }
        defer {
            // The saved uid is still 0, so the thread may become root again (which restores its capabilities).
            let uidBack = rawSyscall(setresuidNumber, -1, 0, -1)
            let gidBack = rawSyscall(setresgidNumber, -1, 0, -1)
            precondition(uidBack == 0 && gidBack == 0 && geteuid() == 0 && getegid() == 0, "cannot switch the thread back to root")
        }
        guard geteuid() == identity.uid, getegid() == identity.gid else {
            throw TestFailure("the thread did not take the ids of \(identity)")
        }
        return try body()
    }

    /// Connects a Unix stream socket to `path` as `identity`, on a thread of its own, and returns the descriptor.
    package static func connect(to path: String, as identity: PeerIdentity, receiveBufferSize: Int? = nil) async throws -> Int32 {
        try await onThread("connect-as-\(identity.uid)") {
            try with(identity) { try UnixSocketAddress.connectedDescriptor(path, receiveBufferSize: receiveBufferSize) }
        }
    }
}

extension CredentialSwitch {
    /// `setpriv`, which runs a program as another user.
    package static let setprivURL = URL(fileURLWithPath: "/usr/bin/setpriv")

    /// The arguments of ``setprivURL`` that run `command` (a program and its arguments) with the real and
    /// effective ids of `identity` and no supplementary groups.
    package static func setprivArguments(_ identity: PeerIdentity, running command: [String]) -> [String] {
        ["--reuid=\(identity.uid)", "--regid=\(identity.gid)", "--clear-groups", "--"] + command
    }
}

/// Runs `body` on a thread of its own (blocking system calls stay off the test's executors).
package func onThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.name = name
        thread.start()
    }
}

/// Unix socket addresses and the blocking calls that take one.
package enum UnixSocketAddress {
    /// Calls `body` with `path` as a `sockaddr_un`; fails if the path does not fit.
    package static func with<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> T) throws -> T {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw TestFailure("socket path too long: \(path)") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        return try withUnsafePointer(to: &address) {
            try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// A new stream socket connected to `path` (blocking), with `SO_RCVBUF` set first if asked.
    package static func connectedDescriptor(_ path: String, receiveBufferSize: Int? = nil) throws -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw TestFailure("socket() failed: \(String(cString: strerror(errno)))") }
        if var size = receiveBufferSize.map(Int32.init) {
            _ = setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        let result = try with(path) { address, length in
            #if canImport(Glibc)
            Glibc.connect(descriptor, address, length)
            #else
            Musl.connect(descriptor, address, length)
            #endif
        }
        guard result == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            throw TestFailure("cannot connect to \(path): \(reason)")
        }
        return descriptor
    }

    /// Whether something accepts connections at `path` right now.
    package static func acceptsConnections(at path: String) -> Bool {
        guard let descriptor = try? connectedDescriptor(path) else { return false }
        close(descriptor)
        return true
    }

    /// Binds a Unix socket at `path` and closes it without unlinking: the file a crashed daemon leaves behind.
    package static func leaveStaleSocket(at path: String) throws {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw TestFailure("socket() failed: errno \(errno)") }
        defer { close(descriptor) }
        let result = try with(path) { bind(descriptor, $0, $1) }
        guard result == 0 else { throw TestFailure("bind(\(path)) failed: errno \(errno)") }
    }
}
