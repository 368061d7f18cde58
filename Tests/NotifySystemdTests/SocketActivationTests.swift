#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifySystemd
import NotifyTestSupport
import Testing

@testable import NotifySystemd

@Suite("Socket activation")
struct SocketActivationTests {
    private func socket(_ descriptor: Int32, _ name: String, unix: Bool = true) -> InheritedSocket {
        InheritedSocket(descriptor: descriptor, name: name, path: unix ? "/run/x.sock" : nil, isListeningUnixStream: unix)
    }

    @Test("not socket-activated: no sockets, nothing chosen")
    func notActivated() throws {
        // The test process has no LISTEN_FDS (swift test does not pass any).
        #expect(try SocketActivation.takeInheritedSockets(unsetEnvironment: false) == [])
        #expect(try SocketActivation.choose(from: [], preferredName: "notifyd") == nil)
    }

    @Test("prefers the socket named like the service, else the first Unix stream socket")
    func choice() throws {
        let sockets = [socket(3, "other", unix: false), socket(4, "unknown"), socket(5, "notifyd")]
        #expect(try SocketActivation.choose(from: sockets, preferredName: "notifyd")?.descriptor == 5)
        #expect(try SocketActivation.choose(from: sockets, preferredName: "absent")?.descriptor == 4)
        #expect(throws: SystemdError.noUsableListenSocket(passed: 1)) {
            try SocketActivation.choose(from: [socket(3, "udp", unix: false)], preferredName: "notifyd")
        }
    }

    @Test("the bound path of a listening Unix socket")
    func boundPath() throws {
        var template = Array("/tmp/nsd-XXXXXX".utf8CString)
        let directory = try #require(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }.map { String(cString: $0) })
        defer { rmdir(directory) }
        let path = directory + "/l.sock"
        let descriptor = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(descriptor >= 0)
        defer {
            close(descriptor)
            unlink(path)
        }
        let bound = try UnixSocketAddress.with(path) { address, length in bind(descriptor, address, length) }
        try #require(bound == 0)
        try #require(listen(descriptor, 4) == 0)
        #expect(SocketActivation.boundPath(of: descriptor) == path)
        #expect(SocketActivation.boundPath(of: -1) == nil)
    }
}
