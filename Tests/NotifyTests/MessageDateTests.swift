import Foundation
import NotifyTestSupport
import Testing

@testable import Notify

private struct Stamp: NotifyMessage {
    static let name = "test.date.stamp"
    var at: Date
}

@Suite("Typed messages: dates")
struct MessageDateTests {
    private func json(_ date: Date) throws -> String {
        String(decoding: try MessageCoding.encode(Stamp(at: date)), as: UTF8.self)
    }

    private func decode(_ text: String) throws -> Date {
        try MessageCoding.decode(Stamp.self, from: Array(#"{"at":"\#(text)"}"#.utf8)).at
    }

    @Test("a date with a fraction of a second keeps it, from poster to observer")
    func fractionSurvivesDelivery() async throws {
        let daemon = try await TestServer.start()
        let center = try await daemon.center()
        let received = Collector<Date>()
        let observation = try center.observe(Stamp.self, on: .immediate) { received.append($0.at) }
        try await center.synchronize()
        let sent = Date(timeIntervalSince1970: 1_800_000_000.25)
        try center.post(Stamp(at: sent))
        #expect(try await received.wait(for: 1) == [sent])
        withExtendedLifetime(observation) {}
        await center.close()
        try await daemon.stop()
    }

    @Test("fractions are written with the fewest digits that give the same date back")
    func fractionEncoding() throws {
        #expect(try json(Date(timeIntervalSince1970: 1_800_000_000.25)) == #"{"at":"2027-01-15T08:00:00.25Z"}"#)
        #expect(try json(Date(timeIntervalSince1970: 1_800_000_000.5)) == #"{"at":"2027-01-15T08:00:00.5Z"}"#)
        // Dates are stored relative to 2001: 1_800_000_000.001 since 1970 is not quite .001 once stored, and is
        // written with the digits that give exactly that `Date` back.
        #expect(try json(Date(timeIntervalSinceReferenceDate: 821_692_800.001)) == #"{"at":"2027-01-15T08:00:00.001Z"}"#)
        #expect(try json(Date(timeIntervalSince1970: 1_800_000_000.001)) == #"{"at":"2027-01-15T08:00:00.0009999Z"}"#)
        #expect(try json(Date(timeIntervalSince1970: -0.75)) == #"{"at":"1969-12-31T23:59:59.25Z"}"#)
    }

    @Test("whole-second dates are written as before, without a fraction")
    func wholeSecondsUnchanged() throws {
        #expect(try json(Date(timeIntervalSince1970: 1_800_000_000)) == #"{"at":"2027-01-15T08:00:00Z"}"#)
    }

    @Test("any date round-trips exactly, whatever its fraction", arguments: [
        1_800_000_000.25, 1_800_000_000.1, 1_800_000_000.123456, 1_800_000_000.999_999_9, 0.000_001, -1.5,
        Date(timeIntervalSinceReferenceDate: 815_000_000.987_654_321).timeIntervalSince1970,
    ])
    func roundTrip(_ seconds: Double) throws {
        let date = Date(timeIntervalSince1970: seconds)
        let back = try MessageCoding.decode(Stamp.self, from: MessageCoding.encode(Stamp(at: date))).at
        let text = try json(date)
        #expect(back == date, "\(text)")
    }

    @Test("both forms decode: whole seconds and fractions of any length, in UTC or with an offset")
    func decodesBothForms() throws {
        #expect(try decode("2027-01-15T08:00:00Z") == Date(timeIntervalSince1970: 1_800_000_000))
        #expect(try decode("2027-01-15T08:00:00.25Z") == Date(timeIntervalSince1970: 1_800_000_000.25))
        #expect(try decode("2027-01-15T08:00:00.250000Z") == Date(timeIntervalSince1970: 1_800_000_000.25))
        #expect(try decode("2027-01-15T10:00:00.5+02:00") == Date(timeIntervalSince1970: 1_800_000_000.5))
        #expect(throws: DecodingError.self) { try decode("2027-01-15 08:00:00") }
        #expect(throws: DecodingError.self) { try decode("2027-01-15T08:00:00.Z") }
    }

    @Test("dates outside the years 0001 to 9999 are refused both ways, with the date in the error")
    func fourDigitYearsOnly() throws {
        #expect(try json(Date(timeIntervalSince1970: 253_402_300_799)) == #"{"at":"9999-12-31T23:59:59Z"}"#)
        #expect(try decode("9999-12-31T23:59:59Z") == Date(timeIntervalSince1970: 253_402_300_799))
        let first = try decode("0001-01-01T00:00:00Z")
        #expect(try json(first) == #"{"at":"0001-01-01T00:00:00Z"}"#)
        for date in [Date(timeIntervalSince1970: 253_402_300_800), first.addingTimeInterval(-1)] {
            let error = #expect(throws: EncodingError.self) { try json(date) }
            #expect("\(error.map { $0 } as Any)".contains("outside the years 0001 to 9999"))
        }
        // A Double cannot tell this instant from the next second: it would be written back as year 10000.
        let error = #expect(throws: DecodingError.self) { try decode("9999-12-31T23:59:59.999999999Z") }
        #expect("\(error.map { $0 } as Any)".contains("9999-12-31T23:59:59.999999999Z is outside the years"))
    }
}
