import Testing

@testable import Notify

/// `ReceivedNotification` keeps its rarely set fields (loss counts, retained flags, origin) in a shared box: these
/// pin that it still behaves as a plain value a user can copy, change, compare and hash.
@Suite("Received notifications as values")
struct ReceivedNotificationTests {
    static let sender = SenderCredentials(pid: 10, uid: 20, gid: 30)

    @Test("every field reads back what was set, and a copy changed afterwards leaves the original alone")
    func fieldsAndCopies() {
        var original = ReceivedNotification(name: "value.a", payload: [1, 2, 3], sequence: 7, sender: Self.sender)
        #expect(original.mergedCount == 0 && original.droppedBefore == 0)
        #expect(!original.isRetained && !original.isRetainedPost && original.origin == nil)
        let origin = NotificationOrigin(host: "far", uid: 1, gid: 2, pid: 3, sequence: 4)
        original.mergedCount = 5
        original.droppedBefore = 6
        original.isRetained = true
        original.isRetainedPost = true
        original.origin = origin
        var copy = original
        copy.mergedCount = 50
        copy.origin = nil
        #expect(original.mergedCount == 5 && original.droppedBefore == 6)
        #expect(original.isRetained && original.isRetainedPost && original.origin == origin)
        #expect(copy.mergedCount == 50 && copy.droppedBefore == 6 && copy.origin == nil && copy.isRetained)
        #expect(copy != original)
        // What `print` shows: the public fields, not the box behind them.
        let shown = String(describing: original)
        #expect(shown.contains("mergedCount: 5") && shown.contains("droppedBefore: 6") && shown.contains("far"), "\(shown)")
    }

    @Test("notifications equal field by field are equal and hash alike, however their fields were set")
    func equalityAndHashing() {
        let plain = ReceivedNotification(name: "value.b", payload: [9], sequence: 1, sender: Self.sender)
        var roundTrip = plain
        roundTrip.droppedBefore = 3
        roundTrip.droppedBefore = 0
        #expect(roundTrip == plain)
        #expect(!roundTrip.hasDetails, "a field set back to its default leaves nothing boxed")
        var unchanged = plain
        unchanged.droppedBefore = 0
        #expect(!unchanged.hasDetails, "setting a field to its default boxes nothing")
        var boxed = plain
        boxed.mergedCount = 2
        let box = boxed.details
        boxed.droppedBefore = 0
        #expect(boxed.details === box, "setting a field to what it is keeps the box (allocates nothing)")
        #expect(roundTrip.hashValue == plain.hashValue)
        var merged = plain
        merged.mergedCount = 1
        #expect(merged != plain)
        #expect(Set([plain, roundTrip, merged]).count == 2)
    }
}
