#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifyServer

/// Where the daemon looks for its configuration file, at start and on every SIGHUP.
///
/// A file named with `--config` must exist. A default location may hold no file, which means the built-in
/// defaults; SIGHUP looks again, so a file created after start is picked up by `systemctl reload`.
struct ConfigurationSource: Sendable, CustomStringConvertible {
    /// The file to read; `nil` when there is no location to look at.
    let path: String?
    /// Named with `--config`: its absence is an error rather than "use the defaults".
    let isExplicit: Bool

    var description: String { path ?? "(no configuration file)" }

    /// The configuration file for a daemon: `--config`, else `/etc/notifyd/notifyd.conf` for the system daemon,
    /// else `$XDG_CONFIG_HOME/notifyd/notifyd.conf` (or `~/.config/...`) for a daemon of one user.
    static func resolve(explicit: String?, isSystemDaemon: Bool, environment: [String: String]) -> Self {
        if let explicit { return Self(path: explicit, isExplicit: true) }
        if isSystemDaemon { return Self(path: AccessConfiguration.systemPath, isExplicit: false) }
        if let configHome = environment["XDG_CONFIG_HOME"], configHome.hasPrefix("/") {
            return Self(path: configHome + "/notifyd/notifyd.conf", isExplicit: false)
        }
        if let home = environment["HOME"], home.hasPrefix("/"), home != "/" {
            return Self(path: home + "/.config/notifyd/notifyd.conf", isExplicit: false)
        }
        return Self(path: nil, isExplicit: false)
    }

    /// What the file says now, or `nil` when a default location holds no file (the defaults apply).
    func load() throws(ConfigurationError) -> AccessConfiguration? {
        guard let path else { return nil }
        // A default location that holds no file, or that this user cannot even look into (a $HOME inherited from
        // another user by setpriv or sudo), means the defaults; a file that is there but unreadable is an error.
        if !isExplicit, access(path, F_OK) != 0 { return nil }
        return try AccessConfiguration.load(path: path)
    }
}
