import NotifyBridge
import Testing

@Suite("Which bucket entries a host applies locally")
struct MirrorLedgerTests {
    @Test("with no put of its own, a host applies every entry")
    func noOwnPuts() {
        var ledger = MirrorLedger<UInt64>()
        let r1 = ledger.received("state.a", revision: 1, value: 10)
        #expect(r1)
        let r2 = ledger.received("state.a", revision: 2, value: 20)
        #expect(r2)
    }

    @Test("its own put coming back, and anything older than it, is not applied")
    func ownPutComesBack() {
        var ledger = MirrorLedger<UInt64>()
        ledger.willPut("state.a")
        let r3 = ledger.didPut("state.a", revision: 5)
        #expect(r3 == nil)
        let r4 = ledger.received("state.a", revision: 4, value: 1)
        #expect(!r4, "older than our put")
        let r5 = ledger.received("state.a", revision: 5, value: 2)
        #expect(!r5, "our own")
        let r6 = ledger.received("state.a", revision: 6, value: 3)
        #expect(r6, "another host's, later")
        let r7 = ledger.received("state.b", revision: 1, value: 3)
        #expect(r7, "other keys are independent")
    }

    @Test("entries that arrive while a put is in flight wait for its revision; the newest later one is applied")
    func whileInFlight() {
        var ledger = MirrorLedger<UInt64>()
        ledger.willPut("state.a")
        let r8 = ledger.received("state.a", revision: 7, value: 70)
        #expect(!r8)
        let r9 = ledger.received("state.a", revision: 9, value: 90)
        #expect(!r9)
        let r10 = ledger.received("state.a", revision: 8, value: 80)
        #expect(!r10, "older than the newest waiting")
        // Our put landed at 8: the entry at 9 (another host's, after ours) wins.
        let r11 = ledger.didPut("state.a", revision: 8)
        #expect(r11 == 90)

        ledger.willPut("state.a")
        let r12 = ledger.received("state.a", revision: 10, value: 100)
        #expect(!r12)
        // Our put landed after it: the waiting entry is older, so the local value (ours) stands.
        let r13 = ledger.didPut("state.a", revision: 11)
        #expect(r13 == nil)
    }

    @Test("two puts in flight: the decision waits for both; a failed put leaves the newest entry to apply")
    func twoInFlightAndFailure() {
        var ledger = MirrorLedger<UInt64>()
        ledger.willPut("state.a")
        ledger.willPut("state.a")
        let r14 = ledger.received("state.a", revision: 3, value: 30)
        #expect(!r14)
        let r15 = ledger.didPut("state.a", revision: 2)
        #expect(r15 == nil, "one still in flight")
        let r16 = ledger.didPut("state.a", revision: nil)
        #expect(r16 == 30, "the second failed: the entry after our first applies")
    }

    @Test("forgetting the revisions (a replaced bucket) keeps a put in flight deciding against the entries that arrive meanwhile")
    func forgetRevisionsKeepsPutsInFlight() {
        var ledger = MirrorLedger<UInt64>()
        ledger.willPut("state.a")
        _ = ledger.didPut("state.a", revision: 40)
        ledger.willPut("state.b")
        ledger.forgetRevisions()
        // The new bucket's revisions start over: another host's entry at 3 is applied, not taken as older than 40.
        let a = ledger.received("state.a", revision: 3, value: 30)
        #expect(a)
        // b's put, in flight across the reset, lands at 2 in the new bucket; another host's 1, arriving before its
        // acknowledgement, is older, and must not be applied over this host's value.
        let b1 = ledger.received("state.b", revision: 1, value: 10)
        #expect(!b1, "waits for the put in flight")
        let applied = ledger.didPut("state.b", revision: 2)
        #expect(applied == nil, "this host's put is newer")
        let b3 = ledger.received("state.b", revision: 3, value: 30)
        #expect(b3)
    }
}
