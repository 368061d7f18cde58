/// The broker's state for each peer, indexed by ``Peer/slot``: kept by the broker, not on the peer, since only
/// the broker reads it. Slots of closed peers are reused.
struct PeerSlots {
    struct Slot {
        /// The mark of the last post or run routed to the peer (to deliver each post once).
        var mark: UInt64 = 0
        /// Where the peer is in the recipients being collected (-1: it may not observe the name).
        var position = 0
        /// The route of the peer's last run of posts, for its next post.
        var parked: PostRun.ParkedRoute?
        /// Whether the slot is in ``PeerSlots/parkedSlots``.
        var isListedAsParked = false
        /// Whether the peer has bytes appended since its last flush.
        var isDirty = false
    }

    private var slots: [Slot] = []
    private var freeSlots: [Int] = []
    /// Slots holding a parked route, each once.
    private var parkedSlots: [Int] = []

    subscript(slot: Int) -> Slot {
        // Read in place: a copy of the slot would retain its parked route's arrays on every routed post.
        _read { yield slots[slot] }
        _modify { yield &slots[slot] }
    }

    /// A fresh slot for a new peer.
    mutating func allocate() -> Int {
        if let free = freeSlots.popLast() {
            slots[free] = Slot()
            return free
        }
        slots.append(Slot())
        return slots.count - 1
    }

    /// Gives back the slot of a closed peer.
    mutating func free(_ slot: Int) {
        slots[slot] = Slot()
        freeSlots.append(slot)
    }

    /// Keeps `route` for the poster in `slot`. A poster resumes and re-parks its route once per read: it is
    /// listed once, not once per park.
    mutating func park(_ route: PostRun.ParkedRoute, in slot: Int) {
        slots[slot].parked = route
        if !slots[slot].isListedAsParked {
            slots[slot].isListedAsParked = true
            parkedSlots.append(slot)
        }
    }

    /// Whether the peer in `slot` parked a route, still valid at `generation`, for the name whose `POST` name field
    /// (length and bytes) is `nameField`.
    func parkedRoute(in slot: Int, continuedBy nameField: UnsafeRawBufferPointer, generation: UInt64) -> Bool {
        // Read in place, not bound to a local: a copy of the route would retain its arrays per post.
        guard slots[slot].parked?.generation == generation else { return false }
        return slots[slot].parked?.encoder.hasName(nameField) ?? false
    }

    /// Drops every parked route.
    mutating func dropParkedRoutes() {
        for slot in parkedSlots {
            slots[slot].parked = nil
            slots[slot].isListedAsParked = false
        }
        parkedSlots.removeAll(keepingCapacity: true)
    }

    /// How many slots hold a parked route.
    var parkedCount: Int { parkedSlots.count }
}
