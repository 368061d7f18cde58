// Fuzzes the typed-message payload decoder, MessageCoding.decode(_:from:) (module Notify,
// protocol/PROTOCOL.md § 12), with a message type that has every kind of field: integers, floating point,
// strings, Booleans, dates, Data, arrays, nested objects, optionals.
//
// Input: the payload (any bytes; the decoder must reject what is not the type's JSON).
// Properties:
// - decoding never crashes: it returns a message or throws;
// - a decoded message encodes (MessageCoding.encode), and that payload decodes again; from then on encoding
//   is a fixed point (same bytes) and decoding gives an equal message, dates included: the library writes
//   at most 9 fraction digits that decode to the same Date, so only the first decoding may lose precision
//   beyond a nanosecond (and never more than that);
// - every date is written as PROTOCOL.md § 12 says: "YYYY-MM-DDThh:mm:ss" then 1 to 9 fraction digits
//   without trailing zeros, or none, then "Z".
import Foundation
import FuzzSupport
import Notify

struct Inner: Codable, Equatable, Sendable {
    var when: Date?
    var label: String?
    var values: [Double]?
}

struct Message: NotifyMessage, Equatable {
    static let name = "org.example.fuzz"
    var int: Int?
    var uint8: UInt8?
    var int64: Int64?
    var double: Double?
    var float: Float?
    var string: String?
    var flag: Bool?
    var date: Date?
    var dates: [Date]?
    var data: Data?
    var strings: [String]?
    var inner: Inner?
    var table: [String: Inner]?
}

@main
enum FuzzTypedMessage {
    static func main() {
        fuzz(FuzzTypedMessage.testOneInput)
    }

    static func dates(_ message: Message) -> [Date] {
        var result: [Date] = []
        if let date = message.date { result.append(date) }
        result += message.dates ?? []
        if let when = message.inner?.when { result.append(when) }
        for key in (message.table ?? [:]).keys.sorted() {
            if let when = message.table![key]!.when { result.append(when) }
        }
        return result
    }

    /// `message` with every date replaced by `replacement`'s, in order.
    static func withDates(_ message: Message, from replacement: Message) -> Message {
        var result = message
        result.date = replacement.date
        result.dates = replacement.dates
        result.inner?.when = replacement.inner?.when
        if let keys = result.table?.keys {
            for key in keys { result.table![key]!.when = replacement.table?[key]?.when }
        }
        return result
    }

    /// The strings the payload holds for the message's Date fields.
    static func dateStrings(_ payload: [UInt8]) -> [String] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any] else {
            require(false, "encode wrote something that is not a JSON object: \(String(decoding: payload, as: UTF8.self))")
            return []
        }
        var result: [String] = []
        if let date = object["date"] as? String { result.append(date) }
        result += object["dates"] as? [String] ?? []
        if let when = (object["inner"] as? [String: Any])?["when"] as? String { result.append(when) }
        for case let inner as [String: Any] in (object["table"] as? [String: Any] ?? [:]).values {
            if let when = inner["when"] as? String { result.append(when) }
        }
        return result
    }

    static func checkDateStrings(_ payload: [UInt8]) {
        // "YYYY-MM-DDThh:mm:ss", then "." and 1 to 9 digits without a trailing zero, or nothing, then "Z".
        for value in dateStrings(payload) {
            let scalars = Array(value.utf8)
            func digits(_ range: Range<Int>) -> Bool { range.allSatisfy { scalars[$0] >= 48 && scalars[$0] <= 57 } }
            var ok = scalars.count >= 20 && digits(0..<4) && scalars[4] == 45 && digits(5..<7) && scalars[7] == 45
                && digits(8..<10) && scalars[10] == UInt8(ascii: "T") && digits(11..<13) && scalars[13] == 58
                && digits(14..<16) && scalars[16] == 58 && digits(17..<19) && scalars.last == UInt8(ascii: "Z")
            if ok && scalars.count > 20 {
                let fraction = scalars[20..<(scalars.count - 1)]
                ok = scalars[19] == UInt8(ascii: ".") && (1...9).contains(fraction.count)
                    && fraction.allSatisfy { $0 >= 48 && $0 <= 57 } && fraction.last != 48
            }
            require(ok, "date written as \(value.debugDescription), not in the § 12 form")
        }
    }

    static func testOneInput(_ input: UnsafeRawBufferPointer) {
        let payload = Array(input)
        let first: Message
        do {
            first = try MessageCoding.decode(Message.self, from: payload)
        } catch {
            _ = "\(error)"
            return
        }
        let encoded: [UInt8]
        do {
            encoded = try MessageCoding.encode(first)
        } catch {
            // JSONEncoder refuses non-finite numbers; JSONDecoder never produces them from JSON numbers.
            require(false, "a decoded message does not encode: \(error); \(first)")
            return
        }
        checkDateStrings(encoded)
        let second: Message
        do {
            second = try MessageCoding.decode(Message.self, from: encoded)
        } catch {
            require(false, "payload written by encode does not decode: \(error); \(String(decoding: encoded, as: UTF8.self))")
            return
        }
        // Everything but dates is exact; dates move by at most a nanosecond (plus rounding of the Double).
        require(
            withDates(second, from: first) == first,
            "round trip changed the message: \(first) -> \(second)")
        for (before, after) in zip(dates(first), dates(second)) {
            let before = before.timeIntervalSinceReferenceDate, after = after.timeIntervalSinceReferenceDate
            let tolerance = 1e-9 + 2 * max(before.ulp, after.ulp)
            require(
                abs(before - after) <= tolerance,
                "date \(before) written as \(String(decoding: encoded, as: UTF8.self)) decodes as \(after)")
        }
        let again: [UInt8]
        do {
            again = try MessageCoding.encode(second)
        } catch {
            require(false, "re-decoded message does not encode: \(error)")
            return
        }
        require(
            again == encoded,
            "encoding is not a fixed point: \(String(decoding: encoded, as: UTF8.self)) then \(String(decoding: again, as: UTF8.self))")
        let third = try? MessageCoding.decode(Message.self, from: again)
        require(third == second, "second round trip changed the message: \(second) -> \(String(describing: third))")
    }
}
