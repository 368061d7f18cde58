#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifyWire

/// Reserved name prefixes and per-user quotas, read from the configuration file
/// (`/etc/notifyd/notifyd.conf` for the system daemon, `--config PATH`).
///
/// ```
/// # Only root may post (and set state) under org.freedesktop.network; everyone may observe.
/// reserve org.freedesktop.network.> owner=root group=root post=owner observe=all
/// reserve com.example.secret.>      owner=1000 group=adm post=owner observe=group
/// quota connections-per-uid 64
/// quota subscriptions-per-uid 10000
/// quota outbound-bytes-per-uid 67108864
/// quota retained-bytes-per-uid 16777216
/// quota state-names-per-uid 10000
/// user-names observe=owner
/// ```
package struct AccessConfiguration: Sendable, Hashable {
    /// Reserved prefixes; the longest matching prefix decides.
    package var rules: [PrefixRule]
    /// Per-user limits (root is exempt).
    package var quotas: Quotas
    /// Who may observe (subscribe to, list, read the state of) a user's `user.<uid>.` names: `.owner` (that uid
    /// and root: the default, as Darwin keeps `user.uid.` names private) or `.all` (`user-names observe=all`).
    package var userNamesObserve: Permission

    /// Creates a configuration.
    package init(rules: [PrefixRule] = [], quotas: Quotas = Quotas(), userNamesObserve: Permission = .owner) {
        self.rules = rules
        self.quotas = quotas
        self.userNamesObserve = userNamesObserve
    }

    /// The `source` of the built-in rule for `user.<uid>.` names.
    package static let builtInSource = "built-in rule"

    /// Who may do something under a reserved prefix (root always may).
    package enum Permission: String, Sendable, Hashable {
        /// Only the rule's owner uid.
        case owner
        /// The owner and members of the rule's group.
        case group
        /// Everyone.
        case all
        /// Nobody but root.
        case none
    }

    /// One reserved prefix.
    package struct PrefixRule: Sendable, Hashable, CustomStringConvertible {
        /// The labels the rule covers: the name itself and every name below it (`org.example` covers
        /// `org.example` and `org.example.x`, not `org.examples`).
        package var prefix: String
        /// The user `owner` permissions name.
        package var ownerUID: UInt32
        /// The group `group` permissions name.
        package var groupGID: UInt32
        /// Who may post (and set state) under the prefix.
        package var post: Permission
        /// Who may subscribe to and list names under the prefix.
        package var observe: Permission
        /// Where it was written, for error messages (`file:line`).
        package var source: String

        /// Creates a rule.
        package init(
            prefix: String, ownerUID: UInt32, groupGID: UInt32, post: Permission, observe: Permission, source: String
        ) {
            self.prefix = prefix
            self.ownerUID = ownerUID
            self.groupGID = groupGID
            self.post = post
            self.observe = observe
            self.source = source
        }

        /// Whether the rule covers `name`.
        package func covers(_ name: String) -> Bool {
            Self.isLabelPrefix(prefix, of: name)
        }

        /// Whether `prefix` is `name` or its leading labels, compared byte for byte.
        static func isLabelPrefix(_ prefix: String, of name: String) -> Bool {
            let prefixBytes = prefix.utf8
            let nameBytes = name.utf8
            guard nameBytes.starts(with: prefixBytes) else { return false }
            let rest = nameBytes.dropFirst(prefixBytes.count)
            return rest.isEmpty || rest.first == UInt8(ascii: ".")
        }

        /// How this reads in logs and error messages.
        package var description: String {
            "reserve \(prefix) owner=\(ownerUID) group=\(groupGID) post=\(post.rawValue) observe=\(observe.rawValue) (\(source))"
        }
    }

    /// Per-uid limits, so one user cannot exhaust the daemon for another. Root is not limited.
    package struct Quotas: Sendable, Hashable {
        /// Open connections of one user.
        package var connectionsPerUID = 256
        /// Subscriptions of all of one user's connections.
        package var subscriptionsPerUID = 65_536
        /// Labels of the distinct patterns of all of one user's connections: what a pattern costs the daemon in
        /// memory (a node per label) and what a post costs to match against it (at most one visit per node).
        package var patternLabelsPerUID = 16_384
        /// Bytes queued or held for all of a user's connections together.
        package var outboundBytesPerUID = 64 * 1024 * 1024
        /// Payload bytes of the retained notifications one user posted.
        package var retainedBytesPerUID = 16 * 1024 * 1024
        /// Names whose state value one user set.
        package var stateNamesPerUID = 10_000

        /// The default quotas.
        package init() {}
    }

    /// Parses the configuration file format shown above.
    ///
    /// - Parameter source: the file name used in error messages and rule sources.
    /// - Throws: ``ConfigurationError`` naming the line and what is wrong with it.
    package static func parse(_ text: String, source: String) throws(ConfigurationError) -> AccessConfiguration {
        var configuration = AccessConfiguration()
        // Split on Unicode scalars, not Characters: a Character can span a separator ("\r\n" is one, and so is a
        // prepended concatenation mark such as U+06DD with the space after it), which read a CRLF file as one line
        // and a rule written back for the prefix "\u{6DD}" as the prefix "\u{6DD} owner=0". A "\r" before the
        // "\n" is white space.
        let lines = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, rawLine) in lines.enumerated() {
            let location = "\(source):\(index + 1)"
            let line = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? rawLine[...]
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
                .map { String(String.UnicodeScalarView($0)) }
            guard let keyword = words.first else { continue }
            switch keyword {
            case "reserve":
                configuration.rules.append(try parseRule(words.dropFirst(), location))
            case "quota":
                try parseQuota(words.dropFirst(), location, into: &configuration.quotas)
            case "user-names":
                guard words.count == 2, words[1].hasPrefix("observe="),
                    let permission = Permission(rawValue: String(words[1].dropFirst("observe=".count))),
                    permission == .owner || permission == .all
                else {
                    throw ConfigurationError(
                        location: location, message: "user-names takes observe=owner (the default) or observe=all")
                }
                configuration.userNamesObserve = permission
            default:
                throw ConfigurationError(
                    location: location, message: "unknown keyword '\(keyword)' (expected reserve, quota or user-names)")
            }
        }
        return configuration
    }

    private static func parseRule(_ words: ArraySlice<String>, _ location: String) throws(ConfigurationError) -> PrefixRule {
        guard var prefix = words.first else {
            throw ConfigurationError(location: location, message: "reserve needs a name prefix")
        }
        for suffix in [".>", "."] where prefix.hasSuffix(suffix) { prefix.removeLast(suffix.count) }
        guard NotificationName.isValid(prefix) else {
            throw ConfigurationError(location: location, message: "'\(words.first!)' is not a valid name prefix")
        }
        var fields: [String: String] = [:]
        for word in words.dropFirst() {
            let parts = word.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, ["owner", "group", "post", "observe"].contains(parts[0]) else {
                throw ConfigurationError(
                    location: location, message: "'\(word)' is not one of owner=, group=, post=, observe=")
            }
            fields[parts[0]] = parts[1]
        }
        let owner = try resolveUser(fields["owner"] ?? "root", location)
        let group = try resolveGroup(fields["group"] ?? "root", location)
        let post = try permission(fields["post"] ?? "owner", location)
        let observe = try permission(fields["observe"] ?? "all", location)
        return PrefixRule(prefix: prefix, ownerUID: owner, groupGID: group, post: post, observe: observe, source: location)
    }

    private static func parseQuota(
        _ words: ArraySlice<String>, _ location: String, into quotas: inout Quotas
    ) throws(ConfigurationError) {
        let parts = Array(words)
        guard parts.count == 2, let value = Int(parts[1]), value > 0 else {
            throw ConfigurationError(location: location, message: "quota needs a name and a positive number")
        }
        switch parts[0] {
        case "connections-per-uid": quotas.connectionsPerUID = value
        case "subscriptions-per-uid": quotas.subscriptionsPerUID = value
        case "pattern-labels-per-uid": quotas.patternLabelsPerUID = value
        case "outbound-bytes-per-uid": quotas.outboundBytesPerUID = value
        case "retained-bytes-per-uid": quotas.retainedBytesPerUID = value
        case "state-names-per-uid": quotas.stateNamesPerUID = value
        default:
            throw ConfigurationError(
                location: location,
                message: "unknown quota '\(parts[0])' (expected connections-per-uid, subscriptions-per-uid, "
                    + "pattern-labels-per-uid, outbound-bytes-per-uid, retained-bytes-per-uid or state-names-per-uid)")
        }
    }

    private static func permission(_ text: String, _ location: String) throws(ConfigurationError) -> Permission {
        guard let permission = Permission(rawValue: text) else {
            throw ConfigurationError(location: location, message: "'\(text)' is not a permission (owner, group, all, none)")
        }
        return permission
    }

    private static func resolveUser(_ text: String, _ location: String) throws(ConfigurationError) -> UInt32 {
        if let uid = UInt32(text) { return uid }
        guard let entry = getpwnam(text) else {
            throw ConfigurationError(location: location, message: "unknown user '\(text)'")
        }
        return entry.pointee.pw_uid
    }

    private static func resolveGroup(_ text: String, _ location: String) throws(ConfigurationError) -> UInt32 {
        if let gid = UInt32(text) { return gid }
        guard let entry = getgrnam(text) else {
            throw ConfigurationError(location: location, message: "unknown group '\(text)'")
        }
        return entry.pointee.gr_gid
    }
}

/// A configuration file that cannot be used, with the line at fault.
package struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// `file:line`.
    package var location: String
    /// What is wrong there.
    package var message: String

    /// How this reads in logs and error messages.
    package var description: String { "\(location): \(message)" }
}

extension AccessConfiguration {
    /// The system daemon's configuration file.
    package static let systemPath = "/etc/notifyd/notifyd.conf"

    /// Reads and parses a configuration file.
    ///
    /// - Throws: ``ConfigurationError`` when the file cannot be read or a line is wrong.
    package static func load(path: String) throws(ConfigurationError) -> AccessConfiguration {
        guard let file = fopen(path, "r") else {
            throw ConfigurationError(location: path, message: "cannot read: \(String(cString: strerror(errno)))")
        }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count > 0 { bytes += chunk.prefix(count) }
            if count < chunk.count { break }
            if bytes.count > 1 << 20 {
                throw ConfigurationError(location: path, message: "larger than 1 MiB; this is not a configuration file")
            }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigurationError(location: path, message: "not valid UTF-8")
        }
        return try parse(text, source: path)
    }
}
