import Foundation

/// Where a NATS server listens, and the credentials its URL carries.
package struct NATSServerAddress: Hashable, Sendable, CustomStringConvertible {
    /// Host name or address.
    package var host: String
    /// TCP port (4222 unless the URL says otherwise).
    package var port: Int
    /// User name from `nats://user:pass@host`.
    package var user: String?
    /// Password from `nats://user:pass@host`.
    package var password: String?
    /// Token from `nats://token@host`.
    package var token: String?

    /// Parses `nats://[user:password@|token@]host[:port]`; the scheme may be left out.
    ///
    /// - Throws: ``NATSClientError/invalidURL(_:)`` when the host or port is missing or unreadable, or the
    ///   scheme is not `nats` (TLS, `tls://`, is not supported).
    package init(url: String) throws(NATSClientError) {
        var rest = Substring(url)
        if let schemeEnd = rest.range(of: "://") {
            guard rest[..<schemeEnd.lowerBound] == "nats" else { throw .invalidURL(url) }
            rest = rest[schemeEnd.upperBound...]
        }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                user = String(credentials[..<colon]).removingPercentEncodingIfPossible
                password = String(credentials[credentials.index(after: colon)...]).removingPercentEncodingIfPossible
            } else {
                token = String(credentials).removingPercentEncodingIfPossible
            }
        }
        var hostPart = rest
        port = 4222
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            hostPart = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                guard let value = Int(after.dropFirst()), (1...65535).contains(value) else { throw .invalidURL(url) }
                port = value
            }
        } else if let colon = rest.lastIndex(of: ":") {
            hostPart = rest[..<colon]
            guard let value = Int(rest[rest.index(after: colon)...]), (1...65535).contains(value) else {
                throw .invalidURL(url)
            }
            port = value
        }
        guard !hostPart.isEmpty, !hostPart.contains("/") else { throw .invalidURL(url) }
        host = String(hostPart)
    }

    /// Creates an address without credentials.
    package init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port`, without credentials (safe to log).
    package var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

extension String {
    fileprivate var removingPercentEncodingIfPossible: String { removingPercentEncoding ?? self }
}
