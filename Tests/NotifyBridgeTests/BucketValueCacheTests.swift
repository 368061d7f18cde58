import NIOCore
import NotifyBridge
import Testing

@Suite("What the bridge knows the bucket holds")
struct BucketValueCacheTests {
    let mine = ByteBuffer(string: "X")
    let theirs = ByteBuffer(string: "Y")

    @Test("another host's older entry, delivered after this host's put was acknowledged, does not replace it")
    func olderEntryDoesNotReplace() {
        var cache = BucketValueCache()
        let generation = cache.generation
        cache.record("state.a", revision: 10, bytes: mine, generation: generation)
        cache.record("state.a", revision: 9, bytes: theirs, generation: generation)
        #expect(cache.holds("state.a", bytes: mine))
        #expect(!cache.holds("state.a", bytes: theirs), "a put of Y would be skipped while the bucket holds X")
        cache.record("state.a", revision: 11, bytes: theirs, generation: generation)
        #expect(cache.holds("state.a", bytes: theirs))
        #expect(!cache.holds("state.b", bytes: theirs), "keys are independent")
    }

    @Test("a deletion at a newer revision: the old value is no longer held")
    func deletion() {
        var cache = BucketValueCache()
        cache.record("state.a", revision: 1, bytes: mine, generation: 0)
        cache.record("state.a", revision: 2, bytes: nil, generation: 0)
        #expect(!cache.holds("state.a", bytes: mine), "a put of X after the deletion would be skipped")
    }

    @Test("starting over: a recreated bucket's low revisions count, a put acknowledged by the old bucket does not")
    func startOver() {
        var cache = BucketValueCache()
        let before = cache.generation
        cache.record("state.a", revision: 40, bytes: mine, generation: before)
        cache.startOver()
        #expect(!cache.holds("state.a", bytes: mine))
        cache.record("state.a", revision: 1, bytes: theirs, generation: cache.generation)
        #expect(cache.holds("state.a", bytes: theirs))
        // A put begun before the bucket was replaced, acknowledged (by the old bucket) after.
        cache.record("state.a", revision: 41, bytes: mine, generation: before)
        #expect(cache.holds("state.a", bytes: theirs) && !cache.holds("state.a", bytes: mine))
    }
}
