#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifyWire

/// Decides who may post, set state and observe which names: the built-in `user.<uid>.` rule and the reserved
/// prefixes of the configuration file (longest prefix wins). Root may do everything.
///
/// The built-in rule acts as a rule for the prefix `user.<uid>` owned by that uid: only it may post, and who may
/// observe is ``AccessConfiguration/userNamesObserve`` (only it, by default). A configured rule with a longer
/// prefix decides what it covers.
///
/// A class, immutable (a reload makes a new one): the broker asks it on every post, and a struct holding the whole
/// configuration was copied for each question.
final class AccessControl {
    let configuration: AccessConfiguration

    init(configuration: AccessConfiguration) {
        self.configuration = configuration
    }

    /// A refusal, with the text the client receives.
    struct Denial: Error {
        var message: String
    }

    /// The rule covering `name`, if any: the one with the longest prefix.
    func rule(for name: String) -> AccessConfiguration.PrefixRule? {
        ruleCovering(name, userOwner: Self.userNamespaceOwner(of: name))
    }

    /// The rule covering every name that starts with the labels `prefix` followed by more labels (a pattern's
    /// literal prefix), if any.
    func rule(forNamesBelow prefix: String) -> AccessConfiguration.PrefixRule? {
        ruleCovering(prefix, userOwner: Self.userNamespaceOwner(of: prefix + ".x"))
    }

    private func ruleCovering(_ name: String, userOwner: UInt32?) -> AccessConfiguration.PrefixRule? {
        var best: AccessConfiguration.PrefixRule?
        for rule in configuration.rules where rule.covers(name) {
            if best == nil || rule.prefix.utf8.count > best!.prefix.utf8.count { best = rule }
        }
        guard let owner = userOwner else { return best }
        let prefix = "user.\(owner)"
        if let best, best.prefix.utf8.count > prefix.utf8.count { return best }
        return AccessConfiguration.PrefixRule(
            prefix: prefix, ownerUID: owner, groupGID: owner, post: .owner, observe: configuration.userNamesObserve,
            source: AccessConfiguration.builtInSource)
    }

    /// Whether a name may fall under a rule at all: the routing of other names skips the lookup.
    func mayBeRestricted(_ name: String) -> Bool {
        !configuration.rules.isEmpty || (configuration.userNamesObserve != .all && Self.startsWithUser(name))
    }

    /// How a denial names the rule: `rule at notifyd.conf:3`, or `built-in rule`.
    static func reference(to rule: AccessConfiguration.PrefixRule) -> String {
        rule.source == AccessConfiguration.builtInSource ? rule.source : "rule at \(rule.source)"
    }

    /// Whether `peer` may post under `name` or set its state (`action` names the operation in the message).
    func checkPost(_ name: String, by peer: Identity, action: String) -> Denial? {
        if peer.uid == 0 { return nil }
        if let owner = Self.userNamespaceOwner(of: name), owner != peer.uid {
            return Denial(
                message: "permission denied: only uid \(owner) and root may \(action) names under 'user.\(owner).' "
                    + "(built-in rule); you are uid \(peer.uid)")
        }
        guard let rule = rule(for: name), !allows(rule.post, rule, peer) else { return nil }
        return Denial(
            message: "permission denied: \(who(rule.post, rule)) may \(action) names under '\(rule.prefix)' "
                + "(\(Self.reference(to: rule))); you are uid \(peer.uid)")
    }

    /// Whether `peer` may subscribe to `pattern`. A pattern that reaches into a prefix the peer may not observe
    /// is refused when the prefix decides every name it can match; otherwise such names are filtered out at
    /// delivery (``mayObserve(_:_:)``).
    func checkObserve(_ pattern: NotificationPattern, by peer: Identity) -> Denial? {
        if peer.uid == 0 { return nil }
        let literal = pattern.literalPrefix
        guard !literal.isEmpty,
            let rule = pattern.hasWildcards ? rule(forNamesBelow: literal) : rule(for: literal),
            !allows(rule.observe, rule, peer)
        else { return nil }
        // Only refuse when no longer rule below the literal prefix could allow it.
        let deeper = configuration.rules.contains { other in
            other.prefix.utf8.count > rule.prefix.utf8.count && AccessConfiguration.PrefixRule.isLabelPrefix(literal, of: other.prefix)
        }
        if deeper { return nil }
        return Denial(
            message: "permission denied: \(who(rule.observe, rule)) may observe names under '\(rule.prefix)' "
                + "(\(Self.reference(to: rule))); you are uid \(peer.uid)")
    }

    /// Whether `peer` may receive a notification covered by `rule`.
    func mayObserve(_ rule: AccessConfiguration.PrefixRule, _ peer: Identity) -> Bool {
        peer.uid == 0 || allows(rule.observe, rule, peer)
    }

    private func allows(_ permission: AccessConfiguration.Permission, _ rule: AccessConfiguration.PrefixRule, _ peer: Identity) -> Bool {
        switch permission {
        case .all: true
        case .none: false
        case .owner: peer.uid == rule.ownerUID
        case .group: peer.uid == rule.ownerUID || peer.groups.contains(rule.groupGID)
        }
    }

    private func who(_ permission: AccessConfiguration.Permission, _ rule: AccessConfiguration.PrefixRule) -> String {
        switch permission {
        case .all: "everyone"
        case .none: "only root"
        case .owner: rule.ownerUID == 0 ? "only root" : "only uid \(rule.ownerUID) and root"
        case .group: "only uid \(rule.ownerUID), members of gid \(rule.groupGID) and root"
        }
    }

    /// For `user.<uid>.…` names, the uid.
    ///
    /// Labels are split on the byte `.`, as the name grammar and the pattern trie split them: splitting the
    /// `String` would take `.` followed by a combining mark as one character and miss the label.
    static func userNamespaceOwner(of name: String) -> UInt32? {
        guard startsWithUser(name) else { return nil }
        let rest = name.utf8.dropFirst(userPrefix.utf8.count)
        guard let dot = rest.firstIndex(of: UInt8(ascii: ".")) else { return nil }  // fewer than three labels
        let digits = rest[..<dot]
        // Canonical decimal only: `user.01000.x` or `user.+1000.x` are not uid 1000's names.
        guard !digits.isEmpty, digits.count <= 10,
            digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            digits.count == 1 || digits.first != UInt8(ascii: "0")
        else { return nil }
        var value: UInt64 = 0
        for digit in digits { value = value * 10 + UInt64(digit - UInt8(ascii: "0")) }
        return value <= UInt64(UInt32.max) ? UInt32(value) : nil
    }

    /// Whether `name` starts with `user.`. Asked on every post: the first byte rules out most names before the
    /// generic comparison runs.
    private static func startsWithUser(_ name: String) -> Bool {
        name.utf8.first == UInt8(ascii: "u") && name.utf8.starts(with: userPrefix.utf8)
    }

    /// The first label of the built-in rule's names, with its dot.
    private static let userPrefix = "user."

    /// A connected peer's identity for access decisions.
    struct Identity {
        var uid: UInt32
        var groups: Set<UInt32>

        init(uid: UInt32, groups: Set<UInt32>) {
            self.uid = uid
            self.groups = groups
        }
    }
}
