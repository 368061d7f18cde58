#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NotifySystemd
import Testing

@Suite("JOURNAL_STREAM detection")
struct JournalStreamTests {
    @Test("parses DEVICE:INODE and rejects anything else")
    func parsing() {
        #expect(JournalStream.parse("8:12345") == JournalStream.Identity(device: 8, inode: 12_345))
        #expect(JournalStream.parse("0:0") == JournalStream.Identity(device: 0, inode: 0))
        for bad in ["", "8", "8:", ":9", "8:9:10", "a:b", "-1:2", " 8:9", "8 :9"] {
            #expect(JournalStream.parse(bad) == nil, "\(bad.debugDescription)")
        }
    }

    @Test("stderr counts as the journal only when JOURNAL_STREAM names it")
    func matchesStandardError() throws {
        let stderrIdentity = try #require(JournalStream.identity(ofDescriptor: STDERR_FILENO))
        let matching = "\(stderrIdentity.device):\(stderrIdentity.inode)"
        #expect(JournalStream.isStandardErrorConnectedToJournal(environment: ["JOURNAL_STREAM": matching]))
        let other = "\(stderrIdentity.device):\(stderrIdentity.inode &+ 1)"
        #expect(!JournalStream.isStandardErrorConnectedToJournal(environment: ["JOURNAL_STREAM": other]))
        #expect(!JournalStream.isStandardErrorConnectedToJournal(environment: ["JOURNAL_STREAM": "garbage"]))
        #expect(!JournalStream.isStandardErrorConnectedToJournal(environment: [:]))
    }

    @Test("a closed descriptor has no identity")
    func closedDescriptor() {
        #expect(JournalStream.identity(ofDescriptor: -1) == nil)
    }
}
