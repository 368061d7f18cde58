import NIOConcurrencyHelpers

/// The owner-bound observations of one center: at most one per (owner, name), each holding its owner weakly.
///
/// Cancelling may wait for a running handler, which may itself call back into the table, so every method
/// returns the observations to cancel instead of cancelling them under the lock.
final class OwnerTable: Sendable {
    private struct Key: Hashable {
        let owner: ObjectIdentifier
        let name: String
    }

    private struct Entry {
        weak var owner: (AnyObject & Sendable)?
        let observation: Observation
    }

    private let entries = NIOLockedValueBox<[Key: Entry]>([:])

    /// Records `observation` for (owner, name). Returns what it replaces (the previous observation of the same
    /// owner and name, or a stale one left by a released owner whose address was reused).
    func insert(_ observation: Observation, owner: AnyObject & Sendable, name: String) -> Observation? {
        let key = Key(owner: ObjectIdentifier(owner), name: name)
        return entries.withLockedValue { entries in
            entries.updateValue(Entry(owner: owner, observation: observation), forKey: key)?.observation
        }
    }

    /// Removes the entry for (owner, name) if it still holds `observation`.
    func remove(_ observation: Observation, ownerID: ObjectIdentifier, name: String) {
        let key = Key(owner: ownerID, name: name)
        entries.withLockedValue { entries in
            if entries[key]?.observation === observation { entries.removeValue(forKey: key) }
        }
    }

    func removeAll(owner: AnyObject) -> [Observation] {
        let id = ObjectIdentifier(owner)
        return entries.withLockedValue { entries in
            let keys = entries.keys.filter { $0.owner == id && entries[$0]?.owner === owner }
            return keys.compactMap { entries.removeValue(forKey: $0)?.observation }
        }
    }

    func remove(owner: AnyObject, name: String) -> Observation? {
        let key = Key(owner: ObjectIdentifier(owner), name: name)
        return entries.withLockedValue { entries in
            guard entries[key]?.owner === owner else { return nil }
            return entries.removeValue(forKey: key)?.observation
        }
    }

    /// Removes and returns the observations whose owner has been released.
    func removeReleased() -> [Observation] {
        entries.withLockedValue { entries in
            let released = entries.filter { $0.value.owner == nil }
            for key in released.keys { entries.removeValue(forKey: key) }
            return released.values.map(\.observation)
        }
    }

    func removeEverything() -> [Observation] {
        entries.withLockedValue { entries in
            defer { entries.removeAll() }
            return entries.values.map(\.observation)
        }
    }

    var count: Int { entries.withLockedValue { $0.count } }
}
