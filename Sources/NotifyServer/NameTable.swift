import CNotifyPosix
import NotifyWire

/// A hash table from exact names to values that finds a name from its raw bytes, as a `POST` carries them, with
/// one name compared per lookup in the common case.
///
/// With 100,000 names, a `Dictionary<ExactName, _>` compared every probed key's bytes, each a cache miss on
/// another `String`'s storage. Here the probe sequence lives in one array of 8-byte slots that also hold 32 bits of
/// each name's hash, so a lookup reads slots until a tag matches and compares that one entry's name. Linear
/// probing at most half full; removal shifts later slots back (no tombstones), so the probe sequences stay short
/// under churn. The hash is the standard library's seeded `Hasher`: another user cannot choose names that collide.
struct NameTable<Value> {
    /// A name and its value, stored densely (in insertion order until removals move the last entry into a hole).
    struct Entry {
        /// The name, as it was inserted.
        let name: String
        /// `name`'s hash, for finding its slot again when slots move.
        let hash: Int
        /// The value.
        var value: Value
    }

    /// The entries, densely.
    private(set) var entries: [Entry] = []
    /// 0: empty; otherwise the upper 32 bits of the entry's hash, then the entry's index plus one.
    private var slots: [UInt64] = []
    /// Names whose bytes were compared with a looked-up name: the lookups' real work, for the tests that bound it.
    private(set) var nameComparisons = 0
    /// Names hashed by lookups and loading ahead: one per post when lookups take the hash loading ahead computed.
    private(set) var namesHashed = 0
    /// Names whose slot was loaded ahead (``prefetchSlot(of:)``).
    private(set) var namesLoadedAhead = 0

    /// An empty table (it allocates on the first insertion).
    init() {}

    /// The number of names.
    var count: Int { entries.count }

    /// The index in ``entries`` of the entry for the name whose UTF-8 is `bytes`, if any.
    ///
    /// - Parameter hint: the name's hash if the caller has it (from ``prefetchSlot(of:)``): a wrong one costs a
    ///   second lookup, never a wrong answer.
    @inline(__always)
    mutating func find(_ bytes: UnsafeRawBufferPointer, hash hint: Int? = nil) -> Int? {
        guard !slots.isEmpty else { return nil }
        if let hint {
            if let entry = probe(bytes, hash: hint) { return entry }
            namesHashed &+= 1
            let hash = Self.hash(bytes)
            return hash == hint ? nil : probe(bytes, hash: hash)
        }
        namesHashed &+= 1
        return probe(bytes, hash: Self.hash(bytes))
    }

    @inline(__always)
    private mutating func probe(_ bytes: UnsafeRawBufferPointer, hash: Int) -> Int? {
        let tag = Self.tag(hash)
        let mask = slots.count - 1
        var position = hash & mask
        while true {
            let slot = slots[position]
            if slot == 0 { return nil }
            if slot >> 32 == tag {
                let entry = Int(truncatingIfNeeded: slot & 0xFFFF_FFFF) - 1
                nameComparisons &+= 1
                if Self.hasBytes(entries[entry].name, bytes) { return entry }
            }
            position = (position &+ 1) & mask
        }
    }

    /// The index in ``entries`` of the entry for `name`, if any.
    mutating func find(_ name: String) -> Int? {
        var name = name
        return name.withUTF8 { find(UnsafeRawBufferPointer($0)) }
    }

    /// The value for `name`, if any.
    mutating func value(for name: String) -> Value? {
        find(name).map { entries[$0].value }
    }

    /// Replaces the value of the entry at `index`.
    mutating func setValue(_ value: Value, at index: Int) {
        entries[index].value = value
    }

    /// Adds `name` with `value`; `name` must not be in the table yet.
    mutating func insert(_ name: String, _ value: Value) {
        if (entries.count + 1) * 2 > slots.count { resize(to: max(16, slots.count * 2)) }
        var bytes = name
        let hash = bytes.withUTF8 { Self.hash(UnsafeRawBufferPointer($0)) }
        entries.append(Entry(name: name, hash: hash, value: value))
        place(entry: entries.count - 1, hash: hash)
    }

    /// Removes the entry at `index`; the last entry takes its place in ``entries``.
    mutating func remove(at index: Int) {
        let mask = slots.count - 1
        // Empty the entry's slot, then move back each later slot of the cluster that may sit at or before the hole
        // (its home is not in the cyclic range between the hole and it).
        var hole = slot(of: index)
        var next = (hole &+ 1) & mask
        while slots[next] != 0 {
            let home = entries[Self.entryIndex(slots[next])].hash & mask
            if (next &- home) & mask >= (next &- hole) & mask {
                slots[hole] = slots[next]
                hole = next
            }
            next = (next &+ 1) & mask
        }
        slots[hole] = 0
        let last = entries.count - 1
        if index != last {
            let moved = slot(of: last)
            slots[moved] = (slots[moved] & ~0xFFFF_FFFF) | UInt64(index + 1)
            entries.swapAt(index, last)
        }
        entries.removeLast()
        // Give memory back after a mass unsubscription, with room to grow again before the next resize.
        if slots.count > 64, entries.count * 8 < slots.count { resize(to: slots.count / 2) }
    }

    // MARK: Loading ahead

    /// Starts loading the slot where a lookup of the name whose UTF-8 is `bytes` begins; returns the name's hash
    /// for ``prefetchEntry(hash:)`` and ``prefetchName(hash:)``. These three are hints: they change nothing and a
    /// later lookup does not rely on them. `mutating` although they change nothing: called on the index's stored
    /// table, a non-mutating method got a copy of it (a retain and release of both arrays, per name).
    mutating func prefetchSlot(of bytes: UnsafeRawBufferPointer) -> Int {
        namesHashed &+= 1
        namesLoadedAhead &+= 1
        let hash = Self.hash(bytes)
        if !slots.isEmpty { slots.withUnsafeBufferPointer { notifyd_prefetch($0.baseAddress! + (hash & (slots.count - 1))) } }
        return hash
    }

    /// Starts loading the entry that the first slot with the hash's tag points to (its slot should be loaded).
    mutating func prefetchEntry(hash: Int) {
        guard let entry = firstTagged(hash) else { return }
        entries.withUnsafeBytes { raw in
            let start = raw.baseAddress! + entry * MemoryLayout<Entry>.stride
            notifyd_prefetch(start)
            notifyd_prefetch(start + (MemoryLayout<Entry>.size - 1))
        }
    }

    /// Starts loading the name of that entry (the entry should be loaded): the storage of a name too long to sit
    /// inside its `String`, where a lookup compares the bytes and a run retains it.
    ///
    /// Reads the storage's address from the `String`'s bits rather than through its API, which would retain it:
    /// touching its reference count is the very miss this avoids. Only a hint: were the layout other than the
    /// standard library's 64-bit one (count and flags, then the object's address under a 4-bit discriminator),
    /// the CPU would be asked to load a useless line, never to fault.
    mutating func prefetchName(hash: Int) {
        guard let entry = firstTagged(hash) else { return }
        entries.withUnsafeBytes { raw in
            let start = entry * MemoryLayout<Entry>.stride + Self.nameOffset
            // The top four bits are 0 only for a native string with storage of its own (not small, not literal).
            let object = raw.load(fromByteOffset: start + 8, as: UInt64.self)
            guard object >> 60 == 0, let storage = UnsafeRawPointer(bitPattern: UInt(object)) else { return }
            notifyd_prefetch(storage)
            notifyd_prefetch(storage + 32)
        }
    }

    private static var nameOffset: Int { MemoryLayout<Entry>.offset(of: \Entry.name)! }

    private func firstTagged(_ hash: Int) -> Int? {
        guard !slots.isEmpty else { return nil }
        let tag = Self.tag(hash)
        let mask = slots.count - 1
        var position = hash & mask
        for _ in 0..<4 {
            let slot = slots[position]
            if slot == 0 { return nil }
            if slot >> 32 == tag { return Self.entryIndex(slot) }
            position = (position &+ 1) & mask
        }
        return nil
    }

    // MARK: Slots

    private static func hash(_ bytes: UnsafeRawBufferPointer) -> Int {
        var hasher = Hasher()
        hasher.combine(bytes: bytes)
        return hasher.finalize()
    }

    @inline(__always)
    private static func tag(_ hash: Int) -> UInt64 { UInt64(UInt(bitPattern: hash) >> 32) }

    @inline(__always)
    private static func entryIndex(_ slot: UInt64) -> Int { Int(truncatingIfNeeded: slot & 0xFFFF_FFFF) - 1 }

    @inline(__always)
    private static func hasBytes(_ name: String, _ bytes: UnsafeRawBufferPointer) -> Bool {
        if let equal = name.utf8.withContiguousStorageIfAvailable({ UnsafeRawBufferPointer($0).bytesEqual(bytes) }) {
            return equal
        }
        return name.utf8.elementsEqual(bytes)
    }

    /// The slot that holds entry `index`.
    private func slot(of index: Int) -> Int {
        let mask = slots.count - 1
        var position = entries[index].hash & mask
        while Self.entryIndex(slots[position]) != index { position = (position &+ 1) & mask }
        return position
    }

    private mutating func place(entry index: Int, hash: Int) {
        let mask = slots.count - 1
        var position = hash & mask
        while slots[position] != 0 { position = (position &+ 1) & mask }
        slots[position] = Self.tag(hash) << 32 | UInt64(index + 1)
    }

    private mutating func resize(to capacity: Int) {
        slots = Array(repeating: 0, count: capacity)
        for index in entries.indices { place(entry: index, hash: entries[index].hash) }
    }
}
