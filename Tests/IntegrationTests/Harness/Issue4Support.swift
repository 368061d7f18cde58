#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NIOCore
import NotifyWire
import Testing

// Helpers for the issue 4 integration tests: a daemon started with extra options, fast raw-protocol posters and
// readers on threads of their own (a million frames are too many for a child process's collected stdout), and
// running tools as other uids with setpriv.

// MARK: Daemon with options

extension IntegrationScope {
    /// Starts `notifyd --socket <socketPath> <extra…>` and waits until it accepts connections. The scope's directory
    /// is made traversable (0755) first, so that clients of other uids can reach a `--socket-mode 666` socket.
    func startIssue4Daemon(
        _ extra: [String], environment: [String: String] = [:], timeout: Double = 20
    ) async throws -> ChildProcess {
        guard chmod(directory, 0o755) == 0 else {
            throw HarnessError("chmod 0755 \(directory) failed: \(String(cString: strerror(errno)))")
        }
        let daemon = try launch(.notifyd, ["--socket", socketPath, "--log-level", "info"] + extra, environment: environment)
        let path = socketPath
        do {
            _ = try await poll("notifyd to accept connections on \(path)", timeout: timeout) { () throws -> Bool? in
                if let termination = daemon.termination {
                    throw HarnessError("notifyd \(termination) before accepting connections")
                }
                return UnixSocket.acceptsConnections(at: path) ? true : nil
            }
        } catch {
            daemon.send(SIGKILL)
            throw HarnessError("\(error)\n\(daemon.diagnostics)")
        }
        return daemon
    }

    /// Stops a daemon with SIGTERM and expects a clean exit.
    func stopIssue4Daemon(_ daemon: ChildProcess, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        daemon.send(SIGTERM)
        let end = try await daemon.waitForExit(timeout: 30)
        #expect(end == .exited(0), "notifyd should exit 0 on SIGTERM\n\(daemon.diagnostics)", sourceLocation: sourceLocation)
    }

    /// Runs `tool` as `uid`/`gid` with no supplementary groups (`setpriv --reuid --regid --clear-groups`).
    func runAs(
        uid: UInt32, gid: UInt32, _ tool: Tool, _ arguments: [String], environment: [String: String] = [:],
        timeout: Double = 20
    ) async throws -> ChildProcess {
        let child = try launchAs(uid: uid, gid: gid, tool, arguments, environment: environment)
        try await child.waitForExit(timeout: timeout)
        return child
    }

    /// Starts `tool` as `uid`/`gid` (see ``runAs(uid:gid:_:_:timeout:)``). The scope does not know this child: the
    /// caller waits for it or kills it (and `ChildProcess` kills it when released).
    /// `environment` is added to the tool's environment (through `env`).
    func launchAs(
        uid: UInt32, gid: UInt32, _ tool: Tool, _ arguments: [String], environment: [String: String] = [:]
    ) throws -> ChildProcess {
        let assignments = environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return try ChildProcess(
            executable: URL(fileURLWithPath: "/usr/bin/setpriv"),
            arguments: ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--", "/usr/bin/env"] + assignments
                + [try BuildProducts.url(of: tool).path] + arguments)
    }
}

/// Whether the installed `notifyd` has a `--config PATH` option (issue 4 asks for one).
let notifydHasConfigOption: Bool = {
    guard let url = try? BuildProducts.url(of: .notifyd) else { return false }
    let process = Process()
    process.executableURL = url
    process.arguments = ["--help"]
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    guard (try? process.run()) != nil else { return false }
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: output, as: UTF8.self).contains("--config")
}()

/// Whether this test process was built with ThreadSanitizer (then so were the tools it runs).
let runningUnderThreadSanitizer: Bool = {
    guard let handle = dlopen(nil, RTLD_NOW) else { return false }
    return dlsym(handle, "__tsan_init") != nil
}()

/// A line of `/proc/PID/status` in bytes, e.g. `VmHWM` (peak resident set size) or `VmRSS`.
func procStatusBytes(pid: Int32, _ key: String) throws -> UInt64 {
    let text = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
    guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(key + ":") }),
        let kilobytes = UInt64(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    else {
        throw HarnessError("no \(key) in /proc/\(pid)/status")
    }
    return kilobytes * 1_024
}

// MARK: Raw protocol over a blocking socket

/// A blocking Unix-socket connection speaking the protocol with `NotifyWire`'s frames, for one thread at a time.
///
/// Input goes into one preallocated buffer that frames are parsed from in place: a reader must keep up with the
/// daemon's whole output (hundreds of thousands of frames a second) even in a debug build.
final class WireConnection {
    let descriptor: Int32
    private let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: 8 << 20, alignment: 8)
    private var start = 0
    private var end = 0
    private var nextRequestID: UInt32 = 1

    /// Connects to `path`; with `uid`/`gid`, as that user (the daemon sees them in `SO_PEERCRED`): the calling
    /// thread takes those ids for the `connect(2)` only (see ``ThreadCredentials``), so call it on a thread of
    /// its own (``onThread(_:_:)``).
    init(path: String, uid: UInt32? = nil, gid: UInt32? = nil, receiveTimeoutSeconds: Int = 60) throws {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw HarnessError("socket() failed: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let connected = try ThreadCredentials.with(uid: uid, gid: gid) {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
        }
        guard connected == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            storage.deallocate()
            throw HarnessError("cannot connect to \(path): \(reason)")
        }
        var timeout = timeval(tv_sec: receiveTimeoutSeconds, tv_usec: 0)
        _ = setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
        storage.deallocate()
    }

    func makeRequestID() -> UInt32 {
        defer { nextRequestID += 1 }
        return nextRequestID
    }

    /// Writes all of `bytes`, blocking while the daemon does not read. A connection the daemon closed fails
    /// with `EPIPE` (never SIGPIPE, which would end the test process).
    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.send(descriptor, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if written < 0 {
                if errno == EINTR { continue }
                throw HarnessError("write to notifyd failed: \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }

    func send(_ frames: [ClientFrame]) throws {
        var buffer = ByteBuffer()
        for frame in frames { frame.encode(into: &buffer) }
        try buffer.withUnsafeReadableBytes { try write($0) }
    }

    /// Reads more bytes into the input buffer; fails at end of file or after the receive timeout.
    private func fill() throws {
        if start == end {
            start = 0
            end = 0
        } else if end > storage.count / 2 {
            // Move the partial frame to the front.
            let count = end - start
            storage.baseAddress!.copyMemory(from: storage.baseAddress! + start, byteCount: count)
            start = 0
            end = count
        }
        while true {
            let count = read(descriptor, storage.baseAddress! + end, storage.count - end)
            if count > 0 {
                end += count
                return
            }
            if count == 0 { throw HarnessError("notifyd closed the connection") }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { throw HarnessError("nothing from notifyd within the receive timeout") }
            throw HarnessError("read from notifyd failed: \(String(cString: strerror(errno)))")
        }
    }

    /// Calls `body` with the type and body bytes of each frame as it arrives, until it returns false.
    func readFrames(_ body: (UInt8, UnsafeRawBufferPointer) throws -> Bool) throws {
        while true {
            while end - start >= 5 {
                let length =
                    Int(storage[start]) << 24 | Int(storage[start + 1]) << 16 | Int(storage[start + 2]) << 8 | Int(storage[start + 3])
                guard length >= 1, length <= 1 << 22 else { throw HarnessError("notifyd sent a frame length of \(length)") }
                guard end - start >= 4 + length else { break }
                let type = storage[start + 4]
                let frame = UnsafeRawBufferPointer(start: storage.baseAddress! + start + 5, count: length - 1)
                start += 4 + length
                if try !body(type, frame) { return }
            }
            try fill()
        }
    }

    /// The next frame, decoded.
    func nextFrame() throws -> ServerFrame {
        var frame: ServerFrame?
        try readFrames { type, body in
            var buffer = ByteBuffer(bytes: body)
            frame = try ServerFrame.decode(type: type, body: &buffer)
            return false
        }
        return frame!
    }

    /// Sends `request` (built with a fresh id) and returns its answer, skipping unsolicited frames.
    func request(_ build: (UInt32) -> ClientFrame) throws -> ServerFrame {
        let id = makeRequestID()
        try send([build(id)])
        while true {
            let frame = try nextFrame()
            switch frame {
            case .ok(id), .pong(id), .posted(id, _, _), .state(id, _), .queryResult(id, _): return frame
            case .error(let error) where error.requestID == id || error.closesConnection: return frame
            default: continue
            }
        }
    }

    /// `HELLO`, expecting `WELCOME`.
    func hello(_ name: String) throws {
        try send([.hello(ClientFrame.Hello(clientName: name))])
        guard case .welcome = try nextFrame() else { throw HarnessError("expected WELCOME") }
    }

    /// A `QUERY`, decoded from its JSON.
    func query<T: Decodable>(_ type: T.Type, _ kind: QueryKind) throws -> T {
        let reply = try request { .query(requestID: $0, kind: kind.rawValue, argument: "") }
        guard case .queryResult(_, let json) = reply else { throw HarnessError("expected QUERY_RESULT, got \(reply)") }
        return try JSONDecoder().decode(T.self, from: Data(json.readableBytesView))
    }
}

/// Runs `body`, failing with `what` if it takes longer than `seconds`. Unlike a task group, it returns at the
/// deadline even when `body` is stuck in a blocking call on another thread (which then ends when the scope kills
/// the daemon).
func issue4Deadline<T: Sendable>(
    _ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let once = ResumeOnce(continuation)
        let work = Task {
            do {
                once.resume(with: .success(try await body()))
            } catch {
                once.resume(with: .failure(error))
            }
        }
        Task {
            try? await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            if once.resume(with: .failure(HarnessError("timed out after \(seconds) s: \(what)"))) { work.cancel() }
        }
    }
}

/// Resumes a continuation the first time only.
final class ResumeOnce<T: Sendable>: Sendable {
    private let continuation: Locked<CheckedContinuation<T, any Error>?>

    init(_ continuation: CheckedContinuation<T, any Error>) {
        self.continuation = Locked(continuation)
    }

    @discardableResult
    func resume(with result: Result<T, any Error>) -> Bool {
        guard let continuation = continuation.withLock({ value in
            defer { value = nil }
            return value
        }) else { return false }
        continuation.resume(with: result)
        return true
    }
}

/// Runs code with other effective ids on the calling thread only.
///
/// The raw `setresuid`/`setresgid` system calls change the credentials of the calling thread alone (glibc's
/// wrappers would change every thread of the process); `connect(2)` records the connecting thread's effective
/// ids as the socket's peer credentials. The real and saved ids stay 0, so the thread can switch back.
enum ThreadCredentials {
    #if arch(x86_64)
    private static let setresuidNumber = 117
    private static let setresgidNumber = 119
    #elseif arch(arm64)
    private static let setresuidNumber = 147
    private static let setresgidNumber = 149
    #endif

    private typealias RawSyscall = @convention(c) (Int, Int, Int, Int) -> Int

    static func with<T>(uid: UInt32?, gid: UInt32?, _ body: () throws -> T) throws -> T {
        guard let uid else { return try body() }
        let gid = gid ?? uid
        guard geteuid() == 0 else { throw HarnessError("the tests must run as root to connect as uid \(uid)") }
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "syscall") else {
            throw HarnessError("cannot find syscall(2) in the process")
        }
        let rawSyscall = unsafeBitCast(symbol, to: RawSyscall.self)
        guard rawSyscall(setresgidNumber, -1, Int(gid), -1) == 0 else { throw HarnessError("setresgid(\(gid)) failed") }
        guard rawSyscall(setresuidNumber, -1, Int(uid), -1) == 0 else {
            _ = rawSyscall(setresgidNumber, -1, 0, -1)
            throw HarnessError("setresuid(\(uid)) failed")
        }
        defer {
            let uidBack = rawSyscall(setresuidNumber, -1, 0, -1)
            let gidBack = rawSyscall(setresgidNumber, -1, 0, -1)
            precondition(uidBack == 0 && gidBack == 0 && geteuid() == 0 && getegid() == 0, "cannot switch the thread back to root")
        }
        return try body()
    }
}

/// Runs `body` on a thread of its own (blocking socket work stays off the test's executors).
func onThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.name = name
        thread.start()
    }
}

// MARK: Flood: many posts over a few names

/// The names and payloads of a flood: `total` posts round-robin over `names`; the k-th post to a name carries the
/// decimal text of k, so a reader can check per-name order and the last value of each name.
struct Flood: Sendable {
    var names: [String]
    var total: Int

    var perName: Int { total / names.count }
    /// The payload of the last post to each name.
    var finalPayload: String { "\(perName - 1)" }

    init(prefix: String, nameCount: Int, total: Int) {
        precondition(total % nameCount == 0)
        names = (0..<nameCount).map { "\(prefix).n\($0)" }
        self.total = total
    }

    /// Posts everything fire-and-forget on a fresh connection at full speed, in large writes, then waits for the
    /// `PONG` of a final `PING`: when this returns, the daemon has processed (fanned out) every post. Fails if the
    /// daemon answers anything but `WELCOME` and `PONG`.
    func post(to path: String) throws {
        let connection = try WireConnection(path: path)
        try connection.hello("issue4-flood-poster")
        let encodedNames = names.map { Array($0.utf8) }
        var batch: [UInt8] = []
        batch.reserveCapacity(1 << 19)
        for index in 0..<total {
            let name = encodedNames[index % names.count]
            let payload = Array("\(index / names.count)".utf8)
            let length = 1 + 4 + 1 + 2 + name.count + 4 + payload.count
            batch.append(contentsOf: [UInt8(length >> 24 & 0xFF), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)])
            batch.append(MessageType.post.rawValue)
            batch.append(contentsOf: [0, 0, 0, 0, 0])  // request id 0, no flags
            batch.append(contentsOf: [UInt8(name.count >> 8), UInt8(name.count & 0xFF)])
            batch.append(contentsOf: name)
            batch.append(contentsOf: [0, 0, 0, UInt8(payload.count)])
            batch.append(contentsOf: payload)
            if batch.count >= 1 << 18 || index == total - 1 {
                try batch.withUnsafeBytes { try connection.write($0) }
                batch.removeAll(keepingCapacity: true)
            }
        }
        let reply = try connection.request { .ping(requestID: $0) }
        guard case .pong = reply else { throw HarnessError("the poster expected PONG, got \(reply)") }
    }
}

/// What a flood reader saw.
struct FloodReception: Sendable {
    /// Notification frames (plain or merged).
    var received = 0
    /// Notifications the daemon merged away or dropped for the reader (it should lose none).
    var lost: UInt64 = 0
    var lastSequence: UInt64 = 0
    /// The first few things that went wrong.
    var problems: [String] = []
}

/// A subscriber of every name of a flood on a raw connection: it must receive every post, in order.
final class FloodReader: Sendable {
    private let state = Locked(FloodReception())
    private let readySignal = Locked(false)

    var reception: FloodReception { state.withLock { $0 } }
    var isReady: Bool { readySignal.withLock { $0 } }

    /// Connects, subscribes (coalesce) and reads, on its own thread, until every post of the flood was received
    /// or reported lost (merged or dropped). It keeps reading after a loss, so it never becomes a stalled client.
    func run(_ flood: Flood, path: String) async throws {
        try await onThread("issue4-flood-reader") { [self] in
            let connection = try WireConnection(path: path)
            try connection.hello("issue4-flood-reader")
            for (index, name) in flood.names.enumerated() {
                let reply = try connection.request {
                    .subscribe(ClientFrame.Subscribe(requestID: $0, subscriptionID: UInt32(index + 1), pattern: name))
                }
                guard case .ok = reply else { throw HarnessError("the reader's SUBSCRIBE \(name) got \(reply)") }
            }
            readySignal.withLock { $0 = true }
            // The names differ only in their last byte (`<prefix>.n0` … `<prefix>.n9`): index by it, check the rest.
            precondition(flood.names.count <= 10)
            let namePrefix = Array(flood.names[0].utf8.dropLast())
            var expected = [Int](repeating: 0, count: flood.names.count)
            var reception = FloodReception()
            defer {
                let snapshot = reception
                state.withLock { $0 = snapshot }
            }
            func problem(_ text: String) {
                if reception.problems.count < 5 { reception.problems.append(text) }
            }
            try connection.readFrames { type, frame in
                var body = frame
                var merged: UInt64 = 0
                switch type {
                case MessageType.notification.rawValue:
                    break
                case MessageType.notificationMerged.rawValue:
                    for offset in 0..<8 { merged = merged << 8 | UInt64(frame[offset]) }
                    body = UnsafeRawBufferPointer(rebasing: frame[8...])
                    reception.lost += merged
                    problem("NOTIFICATION_MERGED (+\(merged)) after \(reception.received) notifications")
                case MessageType.overflow.rawValue:
                    var dropped: UInt64 = 0
                    for offset in 4..<12 { dropped = dropped << 8 | UInt64(frame[offset]) }
                    reception.lost += dropped
                    problem("OVERFLOW (\(dropped) dropped) after \(reception.received) notifications")
                    return reception.received + Int(reception.lost) < flood.total
                default:
                    var buffer = ByteBuffer(bytes: frame)
                    let decoded = try? ServerFrame.decode(type: type, body: &buffer)
                    problem("unexpected frame after \(reception.received) notifications: \(decoded.map { "\($0)" } ?? "type \(type)")")
                    return false
                }
                // sequence u64 | pid u32 | uid u32 | gid u32 | name string | payload
                var sequence: UInt64 = 0
                for offset in 0..<8 { sequence = sequence << 8 | UInt64(body[offset]) }
                let nameLength = Int(body[20]) << 8 | Int(body[21])
                var counter = 0
                for byte in body[(22 + nameLength + 4)...] { counter = counter * 10 + Int(byte) - 48 }
                if sequence <= reception.lastSequence { problem("sequence \(sequence) after \(reception.lastSequence)") }
                let last = Int(body[22 + nameLength - 1]) - 48
                let index: Int? =
                    nameLength == namePrefix.count + 1 && (0..<flood.names.count).contains(last)
                        && (reception.received % 1_000 != 0 || body[22..<(21 + nameLength)].elementsEqual(namePrefix))
                    ? last : nil
                if let index {
                    if merged == 0, counter != expected[index] {
                        problem("\(flood.names[index]): payload \(counter), expected \(expected[index])")
                    }
                    expected[index] = counter + 1
                } else {
                    problem("unexpected name \(String(decoding: body[22..<(22 + nameLength)], as: UTF8.self))")
                }
                reception.lastSequence = sequence
                reception.received += 1
                if reception.received % 10_000 == 0 {
                    let snapshot = reception
                    state.withLock { $0 = snapshot }
                }
                return reception.received + Int(reception.lost) < flood.total
            }
        }
    }
}

// MARK: notifyctl --json output

/// The JSON array a `notifyctl … --json` run printed as its one line of output.
func jsonArray(printedBy child: ChildProcess) throws -> [[String: Any]] {
    guard child.termination == .exited(0), child.stdoutLines.count == 1, let line = child.stdoutLines.first,
        let array = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [[String: Any]]
    else {
        throw HarnessError("expected one line with a JSON array\n\(child.diagnostics)")
    }
    return array
}

/// One `notifyctl listen --json` line.
struct ListenLine: Sendable, CustomStringConvertible {
    var name: String
    var payload: String
    var sequence: UInt64
    var merged: UInt64
    var droppedBefore: UInt64
    var retained: Bool
    var uid: Int

    init(_ line: String) throws {
        let object = try JSONObject(line: line)
        name = try object.string("name")
        payload = (object.fields["payload"] as? String) ?? ""
        sequence = UInt64(try object.int("sequence"))
        merged = UInt64(try object.int("merged"))
        droppedBefore = UInt64(try object.int("dropped_before"))
        retained = (object.fields["retained"] as? Bool) ?? false
        uid = try object.int("uid")
    }

    var description: String {
        "\(name)=\(payload) #\(sequence)" + (merged > 0 ? " +\(merged)" : "") + (droppedBefore > 0 ? " dropped \(droppedBefore)" : "")
            + (retained ? " (retained)" : "")
    }
}
