#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing

extension Integration {
    /// The unit files and `make install`, checked with `systemd-analyze` (it works without a running systemd).
    @Suite("systemd units and make install")
    struct SystemdPackagingTests {
        /// Copies `units` from `source` to a new directory under `scope`, pointing `ExecStart=` at `binary` and
        /// `ExecReload=` at the `notifyctl` beside it.
        ///
        /// `systemd-analyze verify` insists that the `ExecStart=` program exists, and the units name its installed
        /// path (`/usr/local/bin/notifyd`, rewritten by `make install`), which the build machine does not have.
        /// The copies run the freshly built binary instead; nothing else changes.
        static func unitCopies(
            _ units: [String], from source: URL, execStartPrefix: String, binary: URL, in scope: IntegrationScope,
            name: String
        ) throws -> [String] {
            let directory = scope.directory + "/" + name
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            var paths: [String] = []
            for unit in units {
                var text = try String(contentsOf: source.appendingPathComponent(unit), encoding: .utf8)
                text = text.replacingOccurrences(of: "ExecStart=" + execStartPrefix, with: "ExecStart=" + binary.path)
                // ExecStop= runs notifyd too (in the system unit with "+", full privileges).
                text = text.replacingOccurrences(of: "ExecStop=+" + execStartPrefix, with: "ExecStop=+" + binary.path)
                text = text.replacingOccurrences(of: "ExecStop=" + execStartPrefix, with: "ExecStop=" + binary.path)
                // ExecReload= runs the notifyctl installed beside notifyd.
                let installedDirectory = URL(fileURLWithPath: execStartPrefix).deletingLastPathComponent().path
                text = text.replacingOccurrences(
                    of: "ExecReload=" + installedDirectory + "/notifyctl",
                    with: "ExecReload=" + binary.deletingLastPathComponent().appendingPathComponent("notifyctl").path)
                let path = directory + "/" + unit
                try text.write(toFile: path, atomically: true, encoding: .utf8)
                paths.append(path)
            }
            return paths
        }

        /// Runs `systemd-analyze verify` and expects a clean result: exit 0 and no output at all.
        ///
        /// `--man=no`: the units' `Documentation=man:…` pages are installed by `make install`, not on the build
        /// machine.
        static func expectVerifiesCleanly(
            _ paths: [String], user: Bool, scope: IntegrationScope, sourceLocation: SourceLocation = #_sourceLocation
        ) async throws {
            var environment = ProcessInfo.processInfo.environment
            var arguments = ["verify", "--man=no"] + paths
            if user {
                // A user manager needs a runtime directory to resolve %t.
                let runtime = scope.directory + "/runtime"
                try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
                environment["XDG_RUNTIME_DIR"] = runtime
                arguments.insert("--user", at: 0)
            }
            let verify = try await scope.runProcess(
                try SystemdEnvironment.program("systemd-analyze"), arguments, environment: environment)
            #expect(verify.termination == .exited(0), "\(verify.diagnostics)", sourceLocation: sourceLocation)
            #expect(
                verify.stdoutLines.isEmpty && verify.stderrLines.isEmpty,
                "systemd-analyze verify should have nothing to say\n\(verify.diagnostics)", sourceLocation: sourceLocation)
        }

        @Test("systemd-analyze verify: the system and user units are clean")
        func verify() async throws {
            try await withIntegrationScope { scope in
                let binary = try BuildProducts.url(of: .notifyd)
                let units = ["notifyd.socket", "notifyd.service"]
                let system = try Self.unitCopies(
                    units, from: SystemdEnvironment.unitDirectory, execStartPrefix: "/usr/local/bin/notifyd",
                    binary: binary, in: scope, name: "system")
                try await Self.expectVerifiesCleanly(system, user: false, scope: scope)
                let user = try Self.unitCopies(
                    units, from: SystemdEnvironment.unitDirectory.appendingPathComponent("user"),
                    execStartPrefix: "/usr/local/bin/notifyd", binary: binary, in: scope, name: "user")
                try await Self.expectVerifiesCleanly(user, user: true, scope: scope)
            }
        }

        @Test("systemd-analyze security rates notifyd.service OK: exposure 2.0 or less")
        func security() async throws {
            try await withIntegrationScope { scope in
                let unit = SystemdEnvironment.unitDirectory.appendingPathComponent("notifyd.service").path
                let analysis = try await scope.runProcess(
                    try SystemdEnvironment.program("systemd-analyze"), ["security", "--offline=true", unit])
                #expect(analysis.termination == .exited(0), "\(analysis.diagnostics)")
                // "→ Overall exposure level for notifyd.service: 0.5 SAFE 😀"
                let line = try #require(
                    analysis.stdoutLines.first { $0.contains("Overall exposure level for notifyd.service:") },
                    "no overall exposure line\n\(analysis.diagnostics)")
                let rating = line.components(separatedBy: "notifyd.service:").last ?? ""
                let number = try #require(
                    rating.split(separator: " ").first.flatMap { Double($0) }, "no exposure number in \"\(line)\"")
                #expect(number <= 2.0, "exposure \(number) is above 2.0: \(line)\n\(analysis.stdoutLines.joined(separator: "\n"))")
            }
        }

        @Test("make install DESTDIR=… PREFIX=/usr: binaries, units pointing at them, man pages, docs")
        func makeInstall() async throws {
            try await withIntegrationScope { scope in
                let destination = scope.directory + "/root"
                let products = try BuildProducts.directory.get()
                // PRODUCTS= installs the binaries this test run built, instead of a second (release) build from
                // scratch: the build directory of the running tests is locked by SwiftPM, and a fresh release
                // build takes several minutes.
                let make = try await scope.runProcess(
                    try SystemdEnvironment.program("make"),
                    [
                        "-C", SystemdEnvironment.packageRoot.path, "install", "PRODUCTS=\(products.path)",
                        "DESTDIR=\(destination)", "PREFIX=/usr",
                    ],
                    timeout: 120)
                #expect(make.termination == .exited(0), "\(make.diagnostics)")
                let root = destination + "/usr"

                for program in ["notifyd", "notifyctl"] {
                    #expect(access(root + "/bin/" + program, X_OK) == 0, "\(program) installed and executable")
                }
                let version = try await scope.runProcess(URL(fileURLWithPath: root + "/bin/notifyd"), ["--version"])
                #expect(version.stdoutLines.first?.isEmpty == false, "\(version.diagnostics)")

                // Units, with ExecStart= rewritten for the prefix; they verify cleanly once pointed at the files
                // in DESTDIR.
                for (directory, socketPath) in [("system", "/run/notifyd/notifyd.sock"), ("user", "%t/notifyd/notifyd.sock")] {
                    let unitDirectory = URL(fileURLWithPath: root + "/lib/systemd/" + directory)
                    let service = try String(
                        contentsOf: unitDirectory.appendingPathComponent("notifyd.service"), encoding: .utf8)
                    #expect(
                        service.contains("\nExecStart=/usr/bin/notifyd --socket \(socketPath)"),
                        "\(directory) unit: ExecStart= should name /usr/bin/notifyd")
                    #expect(
                        service.contains("\nExecReload=/usr/bin/notifyctl --socket \(socketPath) reload"),
                        "\(directory) unit: ExecReload= should name /usr/bin/notifyctl")
                    #expect(!service.contains("/usr/local/bin/"), "\(directory) unit still names /usr/local")
                    let socket = try String(
                        contentsOf: unitDirectory.appendingPathComponent("notifyd.socket"), encoding: .utf8)
                    #expect(socket.contains("ListenStream=\(socketPath)"))
                    let copies = try Self.unitCopies(
                        ["notifyd.socket", "notifyd.service"], from: unitDirectory, execStartPrefix: "/usr/bin/notifyd",
                        binary: URL(fileURLWithPath: root + "/bin/notifyd"), in: scope, name: "installed-" + directory)
                    try await Self.expectVerifiesCleanly(copies, user: directory == "user", scope: scope)
                }

                // Man pages generated from --help: every option of the binary is documented.
                let page = try String(contentsOfFile: root + "/share/man/man8/notifyd.8", encoding: .utf8)
                #expect(page.hasPrefix(".\\\" Generated by systemd/help2man.sh"))
                #expect(page.contains(".TH NOTIFYD 8"))
                for option in ["socket", "socket\\-mode", "log\\-level", "log", "max\\-payload", "outbound\\-limit"] {
                    #expect(page.contains("\\fB\\-\\-\(option)"), "notifyd.8 documents --\(option)")
                }
                #expect(!page.contains("test\\-stall"), "test-only options stay out of the manual")
                let ctlPage = try String(contentsOfFile: root + "/share/man/man1/notifyctl.1", encoding: .utf8)
                #expect(ctlPage.contains(".TH NOTIFYCTL 1"))
                for subcommand in ["post", "listen", "status"] {
                    #expect(ctlPage.contains(".SS \"notifyctl \(subcommand)\""), "notifyctl.1 documents \(subcommand)")
                }
                #expect(FileManager.default.fileExists(atPath: root + "/share/doc/notifyd/README.md"))
                let example = SystemdEnvironment.unitDirectory.appendingPathComponent("notifyd.conf.example").path
                #expect(
                    FileManager.default.fileExists(atPath: root + "/share/doc/notifyd/notifyd.conf.example")
                        == FileManager.default.fileExists(atPath: example),
                    "the example configuration is installed when systemd/notifyd.conf.example exists")
            }
        }
    }
}
