import Foundation
import NIOConcurrencyHelpers
import NotifyWire

/// A typed notification: a `Codable` payload bound to a name.
///
/// ```swift
/// struct BatteryLevel: NotifyMessage {
///     static let name = "org.example.power.battery"
///     var percent: Int
///     var charging: Bool
/// }
/// try center.post(BatteryLevel(percent: 42, charging: false))
/// let observation = try center.observe(BatteryLevel.self) { level in print(level.percent) }
/// ```
///
/// The payload is the message's JSON encoding (see ``MessageCoding``), readable from any language and
/// printed by `notifyctl listen --json`. A typed name is an ordinary name: string observers of it receive the
/// JSON, and typed observers decode whatever is posted under it, reporting payloads that do not decode. Within
/// one process, two different message types cannot claim the same name.
public protocol NotifyMessage: Codable, Sendable {
    /// The notification name messages of this type are posted under.
    static var name: String { get }
}

/// The payload encoding of typed messages (`protocol/PROTOCOL.md` § 12): UTF-8 JSON, object keys sorted,
/// dates as ISO 8601 strings in UTC (with the fraction of a second when there is one), `Data` as Base64.
public enum MessageCoding {
    /// Encodes a message's payload.
    public static func encode<M: Encodable>(_ message: M) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            guard MessageDate.isWritable(date) else {
                throw EncodingError.invalidValue(
                    date,
                    EncodingError.Context(
                        codingPath: encoder.codingPath, debugDescription: MessageDate.outOfRange(date.description)))
            }
            var container = encoder.singleValueContainer()
            try container.encode(MessageDate.string(from: date))
        }
        encoder.dataEncodingStrategy = .base64
        return Array(try encoder.encode(message))
    }

    /// Decodes a message from a payload.
    public static func decode<M: Decodable>(_ type: M.Type, from payload: [UInt8]) throws -> M {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = MessageDate.date(from: text) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "Expected date string to be ISO8601-formatted.")
            }
            guard MessageDate.isWritable(date) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: MessageDate.outOfRange(text))
            }
            return date
        }
        decoder.dataDecodingStrategy = .base64
        return try decoder.decode(type, from: Data(payload))
    }
}

/// The ISO 8601 form of dates in typed payloads.
///
/// A whole second is written as JSONEncoder's `.iso8601` writes it (`2027-01-15T08:00:00Z`), which is what every
/// earlier version of the library wrote and read; a date with a fraction of a second gets the fewest fraction
/// digits (at most 9) that decode to the same `Date` (`2027-01-15T08:00:00.25Z`), which `.iso8601` drops.
enum MessageDate {
    private static let wholeSeconds = Date.ISO8601FormatStyle()

    /// From 0001-01-01T00:00:00Z up to 10000-01-01T00:00:00Z, as the formatter reads them (its calendar is
    /// Julian before 1582): RFC 3339 years have four digits, and a later date would be written with five.
    private static let writable: Range<Date> = {
        let first = try! wholeSeconds.parse("0001-01-01T00:00:00Z")
        let last = try! wholeSeconds.parse("9999-12-31T23:59:59Z")
        return first..<last.addingTimeInterval(1)
    }()

    /// Whether `date` has a four-digit year, so it can be written in the § 12 form.
    static func isWritable(_ date: Date) -> Bool { writable.contains(date) }

    static func outOfRange(_ date: String) -> String {
        "the date \(date) is outside the years 0001 to 9999 that typed payloads can carry (PROTOCOL.md § 12)"
    }

    static func string(from date: Date) -> String {
        // Reference-date seconds are what `Date` stores: converting to 1970-based seconds could round.
        let seconds = date.timeIntervalSinceReferenceDate
        let whole = seconds.rounded(.down)
        let text = Date(timeIntervalSinceReferenceDate: whole).formatted(wholeSeconds)
        guard whole != seconds, whole.isFinite, text.hasSuffix("Z") else { return text }
        let fraction = seconds - whole
        var digits = ""
        for count in 1...9 {
            let scale = pow(10, Double(count))
            // Rounding up to a whole second would need the next second's text: take more digits instead.
            let units = min((fraction * scale).rounded(), scale - 1)
            digits = String(Int(units))
            digits = String(repeating: "0", count: count - digits.count) + digits
            if Self.date(whole: whole, fraction: digits) == date { break }
        }
        while digits.hasSuffix("0") { digits.removeLast() }
        guard !digits.isEmpty else { return text }
        return String(text.dropLast()) + "." + digits + "Z"
    }

    /// Parses both forms, with `Z` or an offset; `nil` if `text` is neither.
    static func date(from text: String) -> Date? {
        // The fraction, if any, follows the seconds: a "." after the "T" that separates date and time.
        guard let time = text.firstIndex(where: { $0 == "T" || $0 == "t" }),
            let dot = text[time...].firstIndex(of: ".")
        else { return try? wholeSeconds.parse(text) }
        let afterDot = text.index(after: dot)
        let end = text[afterDot...].firstIndex { !("0"..."9").contains($0) } ?? text.endIndex
        let fraction = text[afterDot..<end]
        guard !fraction.isEmpty, let base = try? wholeSeconds.parse(String(text[..<dot] + text[end...])) else {
            return nil
        }
        return date(whole: base.timeIntervalSinceReferenceDate, fraction: fraction)
    }

    /// One computation for both directions, so that the digits chosen when encoding decode to the same `Date`.
    private static func date(whole: Double, fraction: some StringProtocol) -> Date? {
        guard let value = Double("0." + fraction) else { return nil }
        return Date(timeIntervalSinceReferenceDate: whole + value)
    }
}

/// A payload posted under a typed message's name that does not decode as that type.
public struct MessageDecodingError: Error, Sendable, CustomStringConvertible {
    /// The notification name.
    public var name: String
    /// The Swift type it should have decoded as.
    public var typeName: String
    /// Why decoding failed.
    public var reason: String
    /// The notification as received.
    public var notification: ReceivedNotification

    /// The name, the sender's pid, the expected type and why decoding failed, in one sentence.
    public var description: String {
        "payload of '\(name)' from pid \(notification.sender.pid) does not decode as \(typeName): \(reason)"
    }
}

/// Which message type owns which name in this process, so that two types cannot silently share a name.
enum MessageNameRegistry {
    private static let owners = NIOLockedValueBox<[String: ObjectIdentifier]>([:])

    static func register<M: NotifyMessage>(_ type: M.Type) throws(NotifyError) {
        let name = M.name
        let id = ObjectIdentifier(type)
        let existing = owners.withLockedValue { owners -> ObjectIdentifier? in
            if let existing = owners[name], existing != id { return existing }
            owners[name] = id
            return nil
        }
        if existing != nil {
            throw NotifyError.messageNameConflict(name: name, type: String(reflecting: type))
        }
    }
}

extension NotifyCenter {
    /// Posts a typed message without waiting for the daemon (see `post(_:payload:retain:)`).
    ///
    /// - Throws: ``NotifyError/messageNameConflict(name:type:)``, ``NotifyError/encodingFailed(type:reason:)``,
    ///   and the errors of `post(_:payload:retain:)`.
    public func post<M: NotifyMessage>(_ message: M) throws {
        try post(M.name, payload: try Self.encode(message))
    }

    /// Posts a typed message and waits for the daemon's receipt (see `postAndWait(_:payload:retain:)`).
    @discardableResult
    public func postAndWait<M: NotifyMessage>(_ message: M) async throws -> PostReceipt {
        try await postAndWait(M.name, payload: try Self.encode(message))
    }

    /// Observes a typed message: `handler` gets each payload decoded as `M`, on `target`, in daemon order.
    ///
    /// A payload that does not decode is never dropped silently: it is passed to `onDecodingFailure` (on the
    /// same target) when given, reported as ``ConnectionEvent/messageDecodingFailed(_:)`` and logged.
    ///
    /// - Throws: ``NotifyError/messageNameConflict(name:type:)``, ``NotifyError/invalidName(_:)``.
    public func observe<M: NotifyMessage>(
        _ type: M.Type, on target: DeliveryTarget = .current, isolation: isolated (any Actor)? = #isolation,
        onDecodingFailure: (@Sendable (MessageDecodingError) -> Void)? = nil,
        handler: @escaping @Sendable (M) -> Void
    ) throws -> Observation {
        try MessageNameRegistry.register(type)
        return try observe(M.name, on: target, isolation: isolation) { [core] notification in
            do {
                handler(try MessageCoding.decode(M.self, from: notification.payload))
            } catch {
                let failure = MessageDecodingError(
                    name: notification.name, typeName: String(reflecting: M.self), reason: Self.describe(error),
                    notification: notification)
                core.reportDecodingFailure(failure)
                onDecodingFailure?(failure)
            }
        }
    }

    private static func encode<M: NotifyMessage>(_ message: M) throws -> [UInt8] {
        try MessageNameRegistry.register(M.self)
        do {
            return try MessageCoding.encode(message)
        } catch {
            throw NotifyError.encodingFailed(type: String(reflecting: M.self), reason: describe(error))
        }
    }

    private static func describe(_ error: Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, let context):
            return "missing key '\(key.stringValue)'\(path(context))"
        case DecodingError.typeMismatch(let type, let context):
            return "expected \(type)\(path(context)): \(context.debugDescription)"
        case DecodingError.valueNotFound(let type, let context):
            return "missing \(type) value\(path(context))"
        case DecodingError.dataCorrupted(let context):
            return "invalid JSON\(path(context)): \(context.debugDescription)"
        default:
            return "\(error)"
        }
    }

    private static func path(_ context: DecodingError.Context) -> String {
        context.codingPath.isEmpty ? "" : " at " + context.codingPath.map(\.stringValue).joined(separator: ".")
    }
}
