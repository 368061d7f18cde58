import NotifyTestSupport
import Testing

@testable import NotifyServer

/// The exact-name table: what a `Dictionary` would answer, found from a name's bytes, comparing one name per
/// lookup whatever the table's size.
@Suite("Name table")
struct NameTableTests {
    private static func lookUp(_ name: String, in table: inout NameTable<Int>) -> Int? {
        var bytes = name
        return bytes.withUTF8 { table.find(UnsafeRawBufferPointer($0)) }.map { table.entries[$0].value }
    }

    @Test("Inserts, removals and lookups by bytes agree with a Dictionary through growth, shrinking and churn")
    func agreesWithDictionary() {
        var generator = SplitMix64(seed: 13)
        var table = NameTable<Int>()
        var model: [String: Int] = [:]
        // Short (inline) and long names, and names that share a long prefix.
        let names = (0..<3_000).map { index in
            index % 3 == 0 ? "n\(index)" : "com.example.service.component.\(index).changed"
        }
        for round in 0..<40_000 {
            let name = names[Int.random(in: 0..<names.count, using: &generator)]
            if let entry = table.find(name) {
                #expect(model[name] != nil, "\(name) found but never inserted")
                if round % 5 < 3 {
                    table.remove(at: entry)
                    model[name] = nil
                } else {
                    table.setValue(round, at: entry)
                    model[name] = round
                }
            } else {
                #expect(model[name] == nil, "\(name) inserted but not found")
                table.insert(name, round)
                model[name] = round
            }
            if round % 100 == 0 {
                // Loading ahead is a hint: on any table (growing, shrinking, names removed) it changes nothing.
                var bytes = name
                let hash = bytes.withUTF8 { table.prefetchSlot(of: UnsafeRawBufferPointer($0)) }
                table.prefetchEntry(hash: hash)
                table.prefetchName(hash: hash)
            }
            if round % 4_000 == 3_999 || round == 39_999 {
                #expect(table.count == model.count)
                for name in names where Self.lookUp(name, in: &table) != model[name] {
                    Issue.record("round \(round): \(name) gives \(String(describing: Self.lookUp(name, in: &table))), expected \(String(describing: model[name]))")
                }
                #expect(Set(table.entries.map(\.name)) == Set(model.keys))
            }
        }
        // Emptied in random order, the table shrinks on the way (each shrink moves every slot) and still finds
        // every name left; then it gives its slots back and still works.
        var left = Set(model.keys)
        for (removed, name) in left.shuffled(using: &generator).enumerated() {
            table.remove(at: table.find(name)!)
            left.remove(name)
            if removed % 50 == 0 {
                #expect(left.allSatisfy { Self.lookUp($0, in: &table) == model[$0] }, "after \(removed + 1) removals")
            }
        }
        #expect(table.count == 0)
        #expect(Self.lookUp(names[1], in: &table) == nil)
        table.insert(names[1], 7)
        #expect(Self.lookUp(names[1], in: &table) == 7)
    }

    @Test("A lookup compares one name's bytes, with 100,000 names as with 10")
    func oneComparisonPerLookup() {
        for count in [10, 100_000] {
            var table = NameTable<Int>()
            let names = (0..<count).map { "bench.names.n\($0)" }
            for (index, name) in names.enumerated() { table.insert(name, index) }
            let before = table.nameComparisons
            for (index, name) in names.enumerated() where Self.lookUp(name, in: &table) != index {
                Issue.record("\(name) not found")
            }
            let hits = table.nameComparisons - before
            // Probing compares a name only where 32 bits of the hash match: about one in four billion otherwise.
            #expect(hits <= count + count / 1_000, "\(hits) names compared for \(count) lookups that hit")
            let missesBefore = table.nameComparisons
            for index in 0..<count where Self.lookUp("absent.n\(index)", in: &table) != nil {
                Issue.record("absent.n\(index) found")
            }
            #expect(table.nameComparisons - missesBefore <= count / 1_000 + 1, "lookups of absent names compared names")
        }
    }

    @Test("A lookup given the name's hash from loading ahead finds it; given a wrong hash, it still finds it or reports it absent")
    func hashHints() {
        var table = NameTable<Int>()
        let names = (0..<1_000).map { "hinted.name.n\($0)" }
        for (index, name) in names.enumerated() { table.insert(name, index) }
        for (index, name) in names.enumerated() {
            var bytes = name
            bytes.withUTF8 { utf8 in
                let raw = UnsafeRawBufferPointer(utf8)
                let hash = table.prefetchSlot(of: raw)
                #expect(table.find(raw, hash: hash).map { table.entries[$0].value } == index)
                #expect(table.find(raw, hash: hash &+ 1).map { table.entries[$0].value } == index, "a wrong hint")
            }
        }
        var absent = "hinted.name.absent"
        absent.withUTF8 { utf8 in
            let raw = UnsafeRawBufferPointer(utf8)
            #expect(table.find(raw, hash: table.prefetchSlot(of: raw)) == nil)
            #expect(table.find(raw, hash: 12_345) == nil)
        }
    }
}
