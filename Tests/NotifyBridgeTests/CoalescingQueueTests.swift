import NotifyBridge
import Testing

@Suite("Entries waiting to be applied locally")
struct CoalescingQueueTests {
    @Test("however many changes come while nothing is applied, one per name waits: the latest, in first-seen order")
    func latestPerName() async {
        let queue = CoalescingQueue<Int>()
        // The fleet changes ten names 100,000 times while the local daemon is away.
        for change in 0..<100_000 { queue.put(change, for: "state.name\(change % 10)") }
        #expect(queue.count == 10, "\(queue.count) entries wait for ten names")
        var applied: [(String, Int)] = []
        for _ in 0..<10 {
            guard let next = await queue.next() else { break }
            applied.append((next.key, next.value))
        }
        #expect(applied.map(\.0) == (0..<10).map { "state.name\($0)" })
        #expect(applied.map(\.1) == (99_990..<100_000).map { $0 })
        #expect(queue.count == 0)
    }

    @Test("a consumer waiting for an entry gets the next one put; finish ends it once nothing waits")
    func waitsThenFinishes() async {
        let queue = CoalescingQueue<String>()
        let consumer = Task { () -> [String] in
            var seen: [String] = []
            while let next = await queue.next() { seen.append(next.value) }
            return seen
        }
        queue.put("one", for: "a")
        queue.put("two", for: "b")
        // Once both were taken (or are still waiting), finish: next() hands out what waits, then nil.
        queue.finish()
        #expect(await consumer.value == ["one", "two"])
    }
}
