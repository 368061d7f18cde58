import Foundation
import Testing

@testable import Notify

/// Which daemon a center talks to: its own user's, root's, one trusted explicitly, or any daemon on a socket
/// that only root can have created.
@Suite("Daemon user")
struct DaemonUserTests {
    @Test("own user and root are always trusted; another user only when named or with any")
    func allows() {
        let own: UInt32 = 1_000
        #expect(NotifyCenter.DaemonUser.sameUserOrRoot.allows(daemonUID: own, ownUID: own))
        #expect(NotifyCenter.DaemonUser.sameUserOrRoot.allows(daemonUID: 0, ownUID: own))
        #expect(!NotifyCenter.DaemonUser.sameUserOrRoot.allows(daemonUID: 1_001, ownUID: own))
        #expect(NotifyCenter.DaemonUser.uid(1_001).allows(daemonUID: 1_001, ownUID: own))
        #expect(!NotifyCenter.DaemonUser.uid(1_001).allows(daemonUID: 1_002, ownUID: own))
        #expect(NotifyCenter.DaemonUser.anyUser.allows(daemonUID: 1_002, ownUID: own))
        #expect(NotifyCenter.DaemonUser(environment: ["NOTIFYD_DAEMON_UID": "10001"]) == .uid(10_001))
        #expect(NotifyCenter.DaemonUser(environment: ["NOTIFYD_DAEMON_UID": "any"]) == .anyUser)
        #expect(NotifyCenter.DaemonUser(environment: [:]) == .sameUserOrRoot)
    }

    @Test("a socket in a directory only root may write to is root's to place; others are not")
    func rootOnlyDirectory() throws {
        try #require(geteuid() == 0, "needs root to give directories away")
        let base = NSTemporaryDirectory() + "daemon-user-\(getpid())"
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: base) }
        for (name, mode, owner, expected) in [
            ("root-0755", 0o755, UInt32(0), true), ("root-1777", 0o1777, 0, false), ("root-0775", 0o775, 0, false),
            ("user-0755", 0o755, 1_001, false),
        ] as [(String, mode_t, UInt32, Bool)] {
            let directory = base + "/" + name
            try #require(mkdir(directory, 0o700) == 0 && chmod(directory, mode) == 0 && chown(directory, owner, owner) == 0)
            #expect(
                NotifyCenter.DaemonUser.isRootOnlyDirectory(ofSocket: directory + "/notifyd.sock") == expected,
                "\(name)")
        }
        #expect(!NotifyCenter.DaemonUser.isRootOnlyDirectory(ofSocket: base + "/missing/notifyd.sock"))
    }
}
