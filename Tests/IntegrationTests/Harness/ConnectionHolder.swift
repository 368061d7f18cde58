#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import NotifyTestSupport

// Many connections at once, held by another process.
//
// Held by another process, so that the test process's own descriptors (shared by every suite running at the same
// time) do not grow by thousands.

extension IntegrationScope {
    /// Opens `count` connections to the daemon from a Python process (as `identity`, through setpriv), each past
    /// its `WELCOME` and named `namePrefix` + (10,000 + its index), and returns once all are open. They stay open
    /// until the process is killed (`ChildProcess` kills it when released). Fails, with the process's output, if
    /// one gets anything else than `WELCOME`.
    func holdConnections(_ count: Int, namePrefix: String, as identity: PeerIdentity = .root) async throws -> ChildProcess {
        let command = ["/usr/bin/python3", "-c", Self.connectionHolder, socketPath, "\(count)", namePrefix]
        let holder =
            identity == .root
            ? try ChildProcess(executable: URL(fileURLWithPath: command[0]), arguments: Array(command.dropFirst()))
            : try ChildProcess(
                executable: CredentialSwitch.setprivURL, arguments: CredentialSwitch.setprivArguments(identity, running: command))
        try await holder.waitForLine(containing: "ready", on: .stdout, timeout: 60)
        return holder
    }

    /// `python3 -c` code run as `SOCKET COUNT PREFIX` (the frames of protocol/PROTOCOL.md § 6.1 and § 7.1).
    private static let connectionHolder = """
        import socket, struct, sys, time
        def read_frame_type(sock):
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    sys.exit("connection closed before WELCOME")
                data += chunk
            return data[4]
        held = []
        for index in range(int(sys.argv[2])):
            name = (sys.argv[3] + str(10000 + index)).encode()
            body = struct.pack(">HI", 1, 0) + struct.pack(">H", len(name)) + name
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(sys.argv[1])
            sock.sendall(struct.pack(">IB", len(body) + 1, 0x01) + body)
            frame_type = read_frame_type(sock)
            if frame_type != 0x81:
                sys.exit(f"connection {index + 1}: frame type {frame_type:#x} instead of WELCOME")
            held.append(sock)
        print("ready", flush=True)
        time.sleep(3600)
        """
}
