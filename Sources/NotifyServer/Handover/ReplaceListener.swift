#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import NIOConcurrencyHelpers

/// The running daemon's end of ``ReplaceChannel``: a control socket served by a thread of its own. A request
/// from the daemon's own user (or root) stops the server and hands everything over to the requester.
final class ReplaceListener: Sendable {
    let path: String
    private let descriptor: CInt
    private let logger: Logger
    /// Set once a request was accepted: later ones are refused.
    private let isReplacing = NIOLockedValueBox(false)
    /// The control socket's file, removed at the end only if it is still this one.
    private let file: SocketFile.Identity?

    /// Binds the control socket for the daemon at `socketPath` (removing one a previous daemon left behind).
    init(socketPath: String, logger: Logger) throws(ReplaceChannel.Failure) {
        let path = ReplaceChannel.controlPath(for: socketPath)
        self.path = path
        self.logger = logger
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .system("socket") }
        self.descriptor = descriptor
        unlink(path)
        // chmod after bind, not umask around it: the umask is the whole process's, and a test process creates
        // files on other threads meanwhile. Whoever connects in between is refused by its uid anyway.
        let bound = ReplaceChannel.withSocketAddress(path) { bind(descriptor, $0, $1) }
        guard bound == 0, chmod(path, 0o600) == 0, listen(descriptor, 4) == 0 else {
            let failure = ReplaceChannel.Failure.system("cannot listen at \(path)")
            close(descriptor)
            throw failure
        }
        file = SocketFile.identity(at: path)
    }

    /// Serves requests until ``stop()``; `replace` stops the server and delivers its state to the connection, or
    /// returns why it cannot (the request is then refused with that reason, and a later one may succeed).
    func start(replace: @escaping @Sendable (_ connection: CInt) -> String?) {
        let thread = Thread { [self] in
            var shortage = false
            while true {
                let connection = accept(descriptor, nil, nil)
                if connection < 0 {
                    let code = errno
                    if code == EINTR || code == ECONNABORTED { continue }
                    if code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM {
                        // Out of descriptors or memory for now: a successor must still be able to ask later (an
                        // administrator's natural answer to the shortage is `--replace`). This thread only waits.
                        if !shortage {
                            logger.warning(
                                "cannot accept a replace request now; retrying every 100 ms",
                                metadata: ["error": "\(String(cString: strerror(code)))"])
                        }
                        shortage = true
                        usleep(100_000)
                        continue
                    }
                    return  // stop() shut the socket down
                }
                shortage = false
                serve(connection, replace: replace)
            }
        }
        thread.name = "notifyd-replace"
        thread.start()
    }

    private func serve(_ connection: CInt, replace: @escaping @Sendable (CInt) -> String?) {
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var stream = ReplaceChannel.Stream(descriptor: connection)
        guard let (request, passed) = try? stream.read(count: ReplaceChannel.request.count) else {
            close(connection)
            return
        }
        for descriptor in passed { close(descriptor) }
        guard request == ReplaceChannel.request else {
            ReplaceChannel.refuse("not a replace request", on: connection)
            close(connection)
            return
        }
        let requester = ReplaceChannel.peerUID(connection)
        guard let requester, requester == geteuid() || requester == 0 else {
            logger.warning("replace request refused", metadata: ["uid": "\(requester.map(String.init) ?? "?")"])
            ReplaceChannel.refuse("only uid \(geteuid()) or root may replace this daemon", on: connection)
            close(connection)
            return
        }
        let first = isReplacing.withLockedValue { replacing in
            defer { replacing = true }
            return !replacing
        }
        guard first else {
            ReplaceChannel.refuse("another daemon is already replacing this one", on: connection)
            close(connection)
            return
        }
        if let refusal = replace(connection) {
            logger.warning("replace request refused", metadata: ["reason": "\(refusal)"])
            ReplaceChannel.refuse(refusal, on: connection)
            close(connection)
            isReplacing.withLockedValue { $0 = false }
            return
        }
        logger.notice("handing over to a new daemon", metadata: ["uid": "\(requester)"])
    }

    /// Stops serving and removes the control socket (unless `keepFile`: the successor binds its own there).
    func stop(keepFile: Bool = false) {
        shutdown(descriptor, Int32(SHUT_RDWR))
        close(descriptor)
        if !keepFile { SocketFile.remove(path, ifStill: file) }
    }
}

/// Hands everything to the successor that asked on the control socket.
struct ReplaceSink: HandoverSink {
    let connection: CInt

    func shouldHandOver(connections: Int) async -> Bool { true }

    func deliver(_ handover: OutgoingHandover) async throws {
        let connection = connection
        // Blocking socket calls: on a thread of their own, not the concurrency pool's.
        let result: Result<Void, ReplaceChannel.Failure> = await withCheckedContinuation { continuation in
            let thread = Thread {
                defer { close(connection) }
                continuation.resume(returning: Result { () throws(ReplaceChannel.Failure) in
                    try ReplaceChannel.deliver(handover, on: connection)
                })
            }
            thread.name = "notifyd-handover"
            thread.start()
        }
        try result.get()
    }
}
