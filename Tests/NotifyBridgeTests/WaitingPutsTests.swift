import NIOCore
import OrderedCollections
import Testing

@testable import NotifyBridge

@Suite("The bridge's waiting puts: the latest per key, keeping what a change asked")
struct WaitingPutsTests {
    private func put(_ value: String, onlyIfAbsent: Bool, skipIfSamePost: Bool = false) -> BucketMirror.Put {
        BucketMirror.Put(
            name: "org.example.level", kind: .state, bytes: ByteBuffer(string: value),
            origin: Origin(host: "host-a", uid: 0, gid: 0, pid: 1, sequence: 0), onlyIfAbsent: onlyIfAbsent,
            skipIfSamePost: skipIfSamePost)
    }

    private let key = "state.org.example.level"

    @Test("a change made here stays a plain put when a current value (a re-seed) comes after it, and the value is the latest")
    func currentValueAfterChange() {
        var waiting = OrderedDictionary<String, BucketMirror.Put>()
        BucketMirror.wait(put("6", onlyIfAbsent: false), under: key, in: &waiting)
        BucketMirror.wait(put("7", onlyIfAbsent: true, skipIfSamePost: true), under: key, in: &waiting)
        #expect(waiting.count == 1)
        #expect(waiting[key]?.onlyIfAbsent == false, "the bucket's older value must not win over the change")
        #expect(waiting[key]?.skipIfSamePost == false)
        #expect(waiting[key].map { String(buffer: $0.bytes) } == "7")
    }

    @Test("a current value alone stays a put only if absent; a change after it replaces it")
    func changeAfterCurrentValue() {
        var waiting = OrderedDictionary<String, BucketMirror.Put>()
        BucketMirror.wait(put("5", onlyIfAbsent: true), under: key, in: &waiting)
        #expect(waiting[key]?.onlyIfAbsent == true)
        BucketMirror.wait(put("8", onlyIfAbsent: false), under: key, in: &waiting)
        #expect(waiting[key]?.onlyIfAbsent == false)
        #expect(waiting[key].map { String(buffer: $0.bytes) } == "8")
    }

    @Test("a failed change tried again makes the newer current value waiting for its key a plain put; alone, it waits again")
    func retriedChange() {
        var waiting = OrderedDictionary<String, BucketMirror.Put>()
        BucketMirror.wait(put("6", onlyIfAbsent: true), under: key, in: &waiting)
        BucketMirror.retry(put("6", onlyIfAbsent: false), under: key, in: &waiting)
        #expect(waiting[key]?.onlyIfAbsent == false)
        var empty = OrderedDictionary<String, BucketMirror.Put>()
        BucketMirror.retry(put("6", onlyIfAbsent: false), under: key, in: &empty)
        #expect(empty[key].map { String(buffer: $0.bytes) } == "6")
    }
}
