#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifyWire

/// What the kernel's `SO_PEERCRED` does not tell about a client: its user's supplementary groups (for `group`
/// access rules) and its command name (for introspection).
///
/// Both lookups may block for long: groups go through NSS (LDAP or sssd can take seconds), and `/proc` reads
/// can stall. The daemon runs them on a thread pool, never on its event loop (``PeerIdentityResolver``).
package struct PeerIdentityLookup: Sendable {
    /// The groups of `uid`, whose primary group the kernel reported as `gid`; `gid` is always among them. `nil`
    /// when the lookup failed (the NSS source erred: sssd restarting, LDAP timing out), which is not cached, unlike
    /// a user with no entry (only `gid`).
    package var groups: @Sendable (_ uid: UInt32, _ gid: UInt32) -> Set<UInt32>?
    /// The command name of `pid`, or `nil` when it cannot be read.
    package var command: @Sendable (_ pid: UInt32) -> String?
    /// How long a user's groups are reused for its next connections (a change of group membership shows
    /// within this time); zero looks them up for every connection.
    package var groupCacheSeconds: Double
    /// How long a new connection waits for its groups before it is served with the kernel's primary group only (the
    /// lookup may hang: sssd's own timeout is minutes); the groups replace that once the lookup answers.
    package var answerDeadlineSeconds: Double

    /// Creates a lookup from two functions (tests inject slow or failing ones).
    package init(
        groups: @escaping @Sendable (_ uid: UInt32, _ gid: UInt32) -> Set<UInt32>?,
        command: @escaping @Sendable (_ pid: UInt32) -> String?,
        groupCacheSeconds: Double = 60, answerDeadlineSeconds: Double = 5
    ) {
        self.groups = groups
        self.command = command
        self.groupCacheSeconds = groupCacheSeconds
        self.answerDeadlineSeconds = answerDeadlineSeconds
    }

    /// The system's own: `getpwuid_r` and `getgrouplist`, and `/proc/PID/comm`.
    package static let system = PeerIdentityLookup(groups: systemGroups, command: ProcessCommand.name(of:))

    private static func systemGroups(uid: UInt32, gid: UInt32) -> Set<UInt32>? {
        var groups: Set<UInt32> = [gid]
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var scratch = [CChar](repeating: 0, count: 16_384)
        // An error (not "no such user", which is 0 with no result) may pass: two more tries, on this pool thread.
        var status = getpwuid_r(uid, &entry, &scratch, scratch.count, &result)
        for _ in 0..<2 where status != 0 {
            usleep(100_000)
            status = getpwuid_r(uid, &entry, &scratch, scratch.count, &result)
        }
        guard status == 0 else { return nil }
        guard result != nil else { return groups }
        var count: Int32 = 64
        var list = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(entry.pw_name, gid, &list, &count) < 0, count > 64 {
            // Too small: `count` now says how many there are.
            list = [gid_t](repeating: 0, count: Int(count))
            guard getgrouplist(entry.pw_name, gid, &list, &count) >= 0 else { return nil }
        }
        groups.formUnion(list.prefix(Int(count)).map { UInt32($0) })
        return groups
    }
}
