#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOCore
import NIOPosix

/// Watches for a Unix socket appearing at a path, so that a disconnected center can connect as soon as a daemon
/// is back instead of when its backoff runs out.
///
/// It watches the socket's directory with inotify for the socket's name being created (`bind`), moved into place
/// (`rename`, which is how notifyd publishes its socket) or changing mode (`chmod`). When the directory does not
/// exist yet, it watches the nearest existing ancestor for the next path component and moves down as directories
/// appear. The inotify descriptor is a NIO channel on the center's event loop, so nothing blocks and the
/// callback runs on that loop. Where inotify is unavailable (no instances left, an unreadable directory), it
/// does nothing: the reconnect backoff still applies.
///
/// Everything but ``start(path:on:onAppeared:)`` runs on `eventLoop`.
final class SocketPathWatcher: Sendable {
    /// What a watch descriptor is currently watching.
    private struct Watch {
        var descriptor: Int32
        /// The watched directory.
        var directory: String
        /// The name to look for in it: the socket's name, or the next directory on the way to it.
        var name: String
        var isSocketDirectory: Bool
    }

    private struct State {
        var channel: Channel?
        var watch: Watch?
        var isStopped = false
    }

    let path: String
    private let directory: String
    private let socketName: String
    private let eventLoop: EventLoop
    private let inotify: Int32
    private let onAppeared: @Sendable () -> Void
    private let state: NIOLoopBoundBox<State>

    private static let socketMask = UInt32(IN_CREATE | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
    private static let ancestorMask = UInt32(IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

    private init(
        path: String, directory: String, socketName: String, eventLoop: EventLoop, inotify: Int32,
        onAppeared: @escaping @Sendable () -> Void
    ) {
        self.path = path
        self.directory = directory
        self.socketName = socketName
        self.eventLoop = eventLoop
        self.inotify = inotify
        self.onAppeared = onAppeared
        self.state = NIOLoopBoundBox(State(), eventLoop: eventLoop)
    }

    /// Starts watching (on `eventLoop`); `onAppeared` runs on the loop whenever the socket may have appeared.
    ///
    /// - Returns: `nil` when the path cannot be watched (inotify unavailable, nothing on the path watchable).
    static func start(path: String, on eventLoop: EventLoop, onAppeared: @escaping @Sendable () -> Void) -> SocketPathWatcher? {
        eventLoop.preconditionInEventLoop()
        let (directory, name) = split(path)
        guard !name.isEmpty else { return nil }
        let inotify = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard inotify >= 0 else { return nil }
        let watcher = SocketPathWatcher(
            path: path, directory: directory, socketName: name, eventLoop: eventLoop, inotify: inotify,
            onAppeared: onAppeared)
        // Armed before the descriptor is registered: events from now on queue up in the kernel, so nothing
        // that happens while the channel is being set up is missed.
        guard watcher.arm() else {
            close(inotify)
            return nil
        }
        NIOPipeBootstrap(group: eventLoop)
            // inotify returns whole events only and fails a read too small for the next one (up to 16 + 256 bytes).
            .channelOption(ChannelOptions.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 4096))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(InotifyHandler(watcher: watcher))
                }
            }
            .takingOwnershipOfDescriptor(input: inotify)
            .whenComplete { result in
                switch result {
                case .success(let channel):
                    if watcher.state.value.isStopped {
                        channel.close(promise: nil)
                    } else {
                        watcher.state.value.channel = channel
                    }
                case .failure:
                    // Not closed here: after a failed registration NIO has closed the descriptor itself, and
                    // closing it again could close an unrelated one. The backoff goes on as before.
                    watcher.state.value.isStopped = true
                }
            }
        return watcher
    }

    /// The directory watched now (on `eventLoop`; for tests).
    var watchedDirectory: String? { state.value.watch?.directory }

    /// Stops watching and closes the inotify descriptor (on `eventLoop`).
    func stop() {
        eventLoop.preconditionInEventLoop()
        guard !state.value.isStopped else { return }
        state.value.isStopped = true
        state.value.channel?.close(promise: nil)
        state.value.channel = nil
    }

    /// Watches the socket's directory, or the nearest existing ancestor of it. Returns `false` if nothing could
    /// be watched.
    private func arm() -> Bool {
        if let old = state.value.watch {
            // Fails harmlessly when the kernel already dropped the watch (its directory was removed).
            _ = inotify_rm_watch(inotify, old.descriptor)
            state.value.watch = nil
        }
        var directory = self.directory
        var name = socketName
        while true {
            let isSocketDirectory = name == socketName && directory == self.directory
            let descriptor = inotify_add_watch(inotify, directory, isSocketDirectory ? Self.socketMask : Self.ancestorMask)
            if descriptor >= 0 {
                state.value.watch = Watch(
                    descriptor: descriptor, directory: directory, name: name, isSocketDirectory: isSocketDirectory)
                return true
            }
            // Missing (or not a directory): go up. Anything else (permissions, the watch limit): give up.
            guard errno == ENOENT || errno == ENOTDIR, let parent = Self.parent(of: directory) else { return false }
            name = parent.name
            directory = parent.directory
        }
    }

    /// Handles the events of one read (on `eventLoop`).
    fileprivate func handle(_ buffer: inout ByteBuffer) {
        guard !state.value.isStopped else { return }
        var appeared = false
        var rearm = false
        while let descriptor = buffer.readInteger(endianness: .host, as: Int32.self),
            let mask = buffer.readInteger(endianness: .host, as: UInt32.self),
            buffer.readInteger(endianness: .host, as: UInt32.self) != nil,  // cookie
            let length = buffer.readInteger(endianness: .host, as: UInt32.self),
            let nameBytes = buffer.readBytes(length: Int(length))
        {
            if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                // Events were lost: look again.
                rearm = true
                continue
            }
            guard let watch = state.value.watch, descriptor == watch.descriptor else { continue }
            if mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED) != 0 {
                rearm = true  // the watched directory went away
                continue
            }
            let name = String(decoding: nameBytes.prefix { $0 != 0 }, as: UTF8.self)
            guard name == watch.name else { continue }
            if watch.isSocketDirectory {
                appeared = true
            } else if mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 {
                rearm = true  // the next directory on the way exists now
            }
        }
        if rearm {
            guard arm() else {
                stop()
                return
            }
            // The socket may have been created between the directory appearing and the new watch.
            var info = stat()
            if lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFSOCK { appeared = true }
        }
        if appeared { onAppeared() }
    }

    /// The directory and the last component of `path` ("." for a bare name).
    private static func split(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let directory = String(path[..<slash])
        return (directory.isEmpty ? "/" : directory, String(path[path.index(after: slash)...]))
    }

    /// The parent of `directory` and the name of `directory` in it; `nil` at the root or ".".
    private static func parent(of directory: String) -> (directory: String, name: String)? {
        var trimmed = Substring(directory)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard trimmed != "/", trimmed != "." else { return nil }
        let (parent, name) = split(String(trimmed))
        guard !name.isEmpty, name != ".", name != ".." else { return nil }
        return (parent, name)
    }
}

/// Reads the inotify descriptor's events and hands them to the watcher.
private final class InotifyHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let watcher: SocketPathWatcher

    init(watcher: SocketPathWatcher) { self.watcher = watcher }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        watcher.handle(&buffer)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // A read error leaves only the backoff; stop rather than spin on it.
        context.close(promise: nil)
    }
}
