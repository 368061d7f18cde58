#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// A Unix datagram socket that plays the service manager's `NOTIFY_SOCKET`: it collects what the daemon sends
/// with `sd_notify` (`READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1`).
///
/// Reads never block: waits poll the socket every 10 ms up to a timeout and fail loudly when it passes.
package final class ServiceManagerSocket: @unchecked Sendable {
    // @unchecked: the descriptor is only read by the one test that owns this object, one call at a time.
    package let path: String
    private let descriptor: Int32

    /// Binds a datagram socket at `path` (which must not exist).
    package init(path: String) throws {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard descriptor >= 0 else { throw TestFailure("socket(AF_UNIX, SOCK_DGRAM) failed: \(Self.lastError())") }
        let bound = try UnixSocketAddress.with(path) { address, length in bind(descriptor, address, length) }
        guard bound == 0 else {
            let error = Self.lastError()
            close(descriptor)
            throw TestFailure("cannot bind the notify socket \(path): \(error)")
        }
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
    }

    deinit {
        close(descriptor)
        unlink(path)
    }

    /// Every message waiting in the socket right now, oldest first.
    package func drain() -> [String] {
        var messages: [String] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count < 0 {
                if errno == EINTR { continue }
                return messages
            }
            messages.append(String(decoding: buffer[0..<count], as: UTF8.self))
        }
    }

    /// Waits for a message for which `matches` is true; returns it with the messages that arrived before it.
    ///
    /// - Throws: if none arrives within `timeout` seconds (the error lists what did arrive).
    @discardableResult
    package func waitForMessage(
        _ what: String, timeout: Double = 20, matching matches: (String) -> Bool
    ) async throws -> (message: String, earlier: [String]) {
        var earlier: [String] = []
        let message = try await poll("\(what) on NOTIFY_SOCKET; received: \(earlier)", timeout: .seconds(timeout)) {
            for message in drain() {
                if matches(message) { return message }
                earlier.append(message)
            }
            return nil
        }
        return (message, earlier)
    }

    /// Everything that arrives during the next `seconds` (an observation window, not a correctness delay).
    package func collect(for seconds: Double) async throws -> [String] {
        let end = ContinuousClock.now + .milliseconds(Int64(seconds * 1_000))
        var messages: [String] = []
        while ContinuousClock.now < end {
            messages += drain()
            try await Task.sleep(for: .milliseconds(10))
        }
        return messages + drain()
    }

    /// The next message, whatever it is.
    ///
    /// - Throws: if none arrives within `timeout` seconds.
    package func nextMessage(timeout: Double = 20) async throws -> String {
        try await waitForMessage("any message", timeout: timeout) { _ in true }.message
    }

    private static func lastError() -> String { String(cString: strerror(errno)) }
}

extension String {
    /// The `KEY=VALUE` assignments of an `sd_notify` message.
    package var notifyAssignments: [String: String] {
        var result: [String: String] = [:]
        for line in split(separator: "\n") {
            guard let separator = line.firstIndex(of: "=") else { continue }
            result[String(line[..<separator])] = String(line[line.index(after: separator)...])
        }
        return result
    }
}
