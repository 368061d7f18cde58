import NotifyWire

/// How notification names become NATS subjects and back: `PREFIX.NAME`, byte for byte.
///
/// Every valid name is a valid subject (PROTOCOL.md § 8 allows no white space, the only characters a subject
/// token may not hold besides `.`), so nothing is escaped. The way back is checked where the name is used: a
/// subject under the prefix whose rest is not a valid name (a token NATS allows but notifyd does not, such as `#`
/// or `/`) is refused when the bridge posts it.
package struct SubjectMapping: Sendable, Equatable {
    /// The subject prefix, without a trailing dot (e.g. `notifyd`).
    package let prefix: String

    /// - Throws: ``BridgeConfigurationError/invalidPrefix(_:)`` for a prefix that is not a NATS subject
    ///   without wildcards.
    package init(prefix: String) throws(BridgeConfigurationError) {
        guard prefix.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }), !prefix.contains("*"), !prefix.contains(">"),
            !prefix.isEmpty, !prefix.hasPrefix("."), !prefix.hasSuffix("."), !prefix.contains("..")
        else { throw .invalidPrefix(prefix) }
        self.prefix = prefix
    }

    /// The subject a local name is published to.
    package func subject(forName name: String) -> String { prefix + "." + name }

    /// The rest of a subject under the prefix, unchecked: for a caller whose next step checks the name anyway
    /// (posting it does).
    package func unvalidatedName(forSubject subject: String) -> String? {
        let utf8 = subject.utf8
        let prefixLength = prefix.utf8.count
        guard utf8.count > prefixLength + 1, utf8.starts(with: prefix.utf8),
            utf8[utf8.index(utf8.startIndex, offsetBy: prefixLength)] == UInt8(ascii: ".")
        else { return nil }
        return String(utf8.dropFirst(prefixLength + 1))!
    }

    /// The subject pattern that carries the names a notifyd pattern matches (same wildcards).
    package func subject(forPattern pattern: String) -> String { prefix + "." + pattern }
}
