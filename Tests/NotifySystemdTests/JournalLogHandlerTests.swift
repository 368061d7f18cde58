import Logging
import NotifySystemd
import Synchronization
import Testing

@Suite("Journal log handler")
struct JournalLogHandlerTests {
    final class Captured: Sendable {
        let entries = Mutex<[[JournalField]]>([])
        var all: [[JournalField]] { entries.withLock { $0 } }
        func value(_ name: String, in index: Int = 0) -> String? {
            all[index].first { $0.name == name }?.text
        }
    }

    @Test("merges handler, provider and event metadata (event wins) and passes the source location")
    func mergesMetadata() {
        let captured = Captured()
        let provider = Logger.MetadataProvider { ["provided": "yes", "shared": "provider"] }
        var logger = Logger(label: "test.label") { label in
            JournalLogHandler(
                label: label, identifier: "notifyd", metadataProvider: provider,
                sink: { fields in captured.entries.withLock { $0.append(fields) } })
        }
        logger.logLevel = .trace
        logger[metadataKey: "connection"] = "5"
        logger[metadataKey: "shared"] = "handler"
        logger.notice("protocol error, closing connection", metadata: ["shared": "event", "code": "malformed-frame"])
        let line = #line - 1

        #expect(captured.all.count == 1)
        #expect(captured.value("PRIORITY") == "5")
        #expect(captured.value("SYSLOG_IDENTIFIER") == "notifyd")
        #expect(captured.value("LOGGER") == "test.label")
        #expect(captured.value("CONNECTION") == "5")
        #expect(captured.value("PROVIDED") == "yes")
        #expect(captured.value("SHARED") == "event")
        #expect(captured.value("CODE") == "malformed-frame")
        #expect(captured.value("CODE_LINE") == "\(line)")
        #expect(captured.value("CODE_FILE")?.hasSuffix("JournalLogHandlerTests.swift") == true)
        #expect(captured.value("CODE_FUNC") == "mergesMetadata()")
    }

    @Test("the log level filters before the sink")
    func levelFilters() {
        let captured = Captured()
        var logger = Logger(label: "test") { label in
            JournalLogHandler(label: label, identifier: "t", sink: { fields in captured.entries.withLock { $0.append(fields) } })
        }
        logger.logLevel = .warning
        logger.info("hidden")
        logger.warning("shown")
        #expect(captured.all.count == 1)
        #expect(captured.value("MESSAGE") == "shown")
    }
}
