import Logging
import NotifySystemd
import Testing

@Suite("Journal entries")
struct JournalEntryTests {
    private func entry(
        level: Logger.Level = .info, message: String = "connection opened", metadata: Logger.Metadata = [:],
        includesMetadataInMessage: Bool = true, error: (any Error)? = nil
    ) -> JournalEntry {
        JournalEntry(
            level: level, message: message, metadata: metadata, identifier: "notifyd", label: "notifyd",
            file: "NotifyServer/PeerChannelHandler.swift", function: "channelActive(context:)", line: 65,
            error: error, includesMetadataInMessage: includesMetadataInMessage)
    }

    @Test("standard fields: MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, CODE_FILE/LINE/FUNC, LOGGER")
    func standardFields() {
        let fields = entry().fields
        #expect(fields.map(\.name) == [
            "MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "LOGGER",
        ])
        let entry = entry()
        #expect(entry["MESSAGE"] == "connection opened")
        #expect(entry["PRIORITY"] == "6")
        #expect(entry["SYSLOG_IDENTIFIER"] == "notifyd")
        #expect(entry["CODE_FILE"] == "NotifyServer/PeerChannelHandler.swift")
        #expect(entry["CODE_LINE"] == "65")
        #expect(entry["CODE_FUNC"] == "channelActive(context:)")
        #expect(entry["LOGGER"] == "notifyd")
    }

    @Test("PRIORITY for every log level", arguments: [
        (Logger.Level.trace, "7"), (.debug, "7"), (.info, "6"), (.notice, "5"), (.warning, "4"), (.error, "3"),
        (.critical, "2"),
    ])
    func priority(level: Logger.Level, expected: String) {
        #expect(entry(level: level)["PRIORITY"] == expected)
        #expect(String(SyslogPriority(level).rawValue) == expected)
    }

    @Test("every level has a mapping, and more severe levels never get a lower priority")
    func priorityOrder() {
        let priorities = Logger.Level.allCases.map { SyslogPriority($0).rawValue }
        #expect(priorities == priorities.sorted(by: >))
    }

    @Test("metadata keys become valid field names; values are intact")
    func metadataFields() {
        let entry = entry(metadata: [
            "connection": "7", "pid": "4242", "uid": "1000", "client": "notifyctl", "client.name": "x",
            "daemonRestarted": "true",
        ])
        #expect(entry["CONNECTION"] == "7")
        #expect(entry["PID"] == "4242")
        #expect(entry["UID"] == "1000")
        #expect(entry["CLIENT"] == "notifyctl")
        #expect(entry["CLIENT_NAME"] == "x")
        #expect(entry["DAEMON_RESTARTED"] == "true")
        for field in entry.fields {
            #expect(JournalFieldName.isValid(field.name), "\(field.name)")
        }
        #expect(Set(entry.fields.map(\.name)).count == entry.fields.count, "no duplicate names")
    }

    @Test("a metadata key that maps to a standard field or to another key's name gets a suffix")
    func collisions() {
        let entry = entry(metadata: ["message": "m", "priority": "p", "a.b": "1", "a_b": "2", "A-B": "3"])
        #expect(entry["MESSAGE"]?.hasPrefix("connection opened") == true)
        #expect(entry["MESSAGE_2"] == "m")
        #expect(entry["PRIORITY"] == "6")
        #expect(entry["PRIORITY_2"] == "p")
        // Sorted by key: "A-B" < "a.b" < "a_b".
        #expect(entry["A_B"] == "3")
        #expect(entry["A_B_2"] == "1")
        #expect(entry["A_B_3"] == "2")
    }

    @Test("MESSAGE repeats the metadata sorted by key, unless asked not to")
    func messageWithMetadata() {
        let metadata: Logger.Metadata = ["uid": "0", "pid": "12", "connection": "3"]
        #expect(entry(metadata: metadata)["MESSAGE"] == "connection opened (connection=3 pid=12 uid=0)")
        #expect(entry(metadata: metadata, includesMetadataInMessage: false)["MESSAGE"] == "connection opened")
        #expect(entry(metadata: [:])["MESSAGE"] == "connection opened")
    }

    @Test("values are binary-safe: newlines, NUL, tabs and non-ASCII pass unchanged")
    func binarySafeValues() {
        let awkward = "line one\nline two\0after NUL\ttab é 日本 \u{1F600}="
        let entry = entry(message: awkward, metadata: ["reason": .string(awkward)], includesMetadataInMessage: false)
        let reason = entry.fields.first { $0.name == "REASON" }
        #expect(reason?.value == Array(awkward.utf8))
        #expect(entry.fields.first { $0.name == "MESSAGE" }?.value == Array(awkward.utf8))
        // The iovec bytes are NAME=value, with the value's own '=' and newlines untouched.
        #expect(reason?.assignment == Array("REASON=".utf8) + Array(awkward.utf8))
    }

    @Test("raw field values keep bytes that are not UTF-8")
    func rawBytes() {
        let bytes: [UInt8] = [0xFF, 0x00, 0x0A, 0xC3, 0x28, 0x3D]
        let field = JournalField(name: "PAYLOAD", value: bytes)
        #expect(field.value == bytes)
        #expect(field.assignment == Array("PAYLOAD=".utf8) + bytes)
    }

    @Test("nested metadata is flattened; arrays and convertibles are described")
    func nestedMetadata() {
        let entry = entry(metadata: [
            "request": ["id": "7", "kind": "post"], "names": ["a", "b"], "count": .stringConvertible(42),
            "empty": [:],
        ])
        #expect(entry["REQUEST_ID"] == "7")
        #expect(entry["REQUEST_KIND"] == "post")
        #expect(entry["NAMES"] == #"["a", "b"]"#)
        #expect(entry["COUNT"] == "42")
        #expect(entry["EMPTY"] == "[:]")
    }

    @Test("an error is sent as ERROR")
    func errorField() {
        struct Broken: Error, CustomStringConvertible { var description: String { "it broke" } }
        #expect(entry(error: Broken())["ERROR"] == "it broke")
        #expect(entry()["ERROR"] == nil)
    }

    @Test("sending to the journal never fails the caller, with or without a journal")
    func writerSmoke() {
        let result = JournalWriter.send(entry(metadata: ["bytes": "a\nb\0c"]).fields)
        #expect(result <= 0)
        #expect(JournalWriter.send([]) == 0)
    }
}
