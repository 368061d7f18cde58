import Foundation
import NotifyTestSupport

/// One notification as an observer process printed it.
struct Delivery: Hashable, Sendable, CustomStringConvertible {
    var pid: Int
    var sequence: UInt64
    var payload: String

    var description: String { "#\(sequence) from pid \(pid): \(payload)" }

    /// Parses a `notify-test-peer observe` line: `<sender pid> <sequence> <payload>`.
    init(peerLine line: String) throws {
        let fields = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard fields.count == 3, let pid = Int(fields[0]), let sequence = UInt64(fields[1]) else {
            throw TestFailure("not a test-peer notification line: \"\(line)\"")
        }
        self.init(pid: pid, sequence: sequence, payload: String(fields[2]))
    }

    /// Parses a `notifyctl listen --json` line.
    init(jsonLine line: String) throws {
        let object = try JSONObject(line: line)
        self.init(
            pid: try object.int("pid"), sequence: UInt64(try object.int("sequence")),
            payload: try object.string("payload"))
    }

    init(pid: Int, sequence: UInt64, payload: String) {
        self.pid = pid
        self.sequence = sequence
        self.payload = payload
    }
}

/// A JSON object parsed from one line of output, with typed accessors that fail with a clear message.
struct JSONObject {
    let line: String
    let fields: [String: Any]

    init(line: String) throws {
        self.line = line
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw TestFailure("not a JSON object: \"\(line)\"")
        }
        fields = object
    }

    func int(_ key: String) throws -> Int {
        guard let value = fields[key] as? Int else { throw TestFailure("no integer \"\(key)\" in \(line)") }
        return value
    }

    func bool(_ key: String) throws -> Bool {
        guard let value = fields[key] as? Bool else { throw TestFailure("no boolean \"\(key)\" in \(line)") }
        return value
    }

    func string(_ key: String) throws -> String {
        guard let value = fields[key] as? String else { throw TestFailure("no string \"\(key)\" in \(line)") }
        return value
    }
}

/// Describes where two sequences first differ, or returns `nil` when they are equal.
func firstDifference<T: Equatable>(_ lhs: [T], _ rhs: [T]) -> String? {
    for index in 0..<min(lhs.count, rhs.count) where lhs[index] != rhs[index] {
        return "first difference at index \(index): \(lhs[index]) vs \(rhs[index])"
    }
    if lhs.count != rhs.count { return "lengths differ: \(lhs.count) vs \(rhs.count)" }
    return nil
}

/// The subscriber count from `notifyctl post --wait` output ("delivered to N subscriber(s) (sequence S)").
func deliveredCount(fromPostOutput lines: [String]) throws -> Int {
    guard let line = lines.first(where: { $0.hasPrefix("delivered to ") }),
        let count = Int(line.dropFirst("delivered to ".count).prefix { $0.isNumber })
    else {
        throw TestFailure("no \"delivered to N subscribers\" line in notifyctl post output: \(lines)")
    }
    return count
}

/// The JSON array a `notifyctl … --json` run printed as its one line of output.
func jsonArray(printedBy child: ChildProcess) throws -> [[String: Any]] {
    guard child.termination == .exited(0), child.stdoutLines.count == 1, let line = child.stdoutLines.first,
        let array = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [[String: Any]]
    else {
        throw TestFailure("expected one line with a JSON array\n\(child.diagnostics)")
    }
    return array
}

/// One `notifyctl listen --json` line.
struct ListenLine: Sendable, CustomStringConvertible {
    var name: String
    var payload: String
    var sequence: UInt64
    var merged: UInt64
    var droppedBefore: UInt64
    var retained: Bool
    var uid: Int

    init(_ line: String) throws {
        let object = try JSONObject(line: line)
        name = try object.string("name")
        payload = (object.fields["payload"] as? String) ?? ""
        sequence = UInt64(try object.int("sequence"))
        merged = UInt64(try object.int("merged"))
        droppedBefore = UInt64(try object.int("dropped_before"))
        retained = (object.fields["retained"] as? Bool) ?? false
        uid = try object.int("uid")
    }

    var description: String {
        "\(name)=\(payload) #\(sequence)" + (merged > 0 ? " +\(merged)" : "") + (droppedBefore > 0 ? " dropped \(droppedBefore)" : "")
            + (retained ? " (retained)" : "")
    }
}
