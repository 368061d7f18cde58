import NotifyWire

/// The name of the last notification read and the observations it went to, so that the notifications after it
/// on the same name are routed without decoding the name, taking the center's lock or hashing.
///
/// The daemon sends a burst of posts to one name as consecutive `NOTIFICATION` frames; for each one after the
/// first, the library only compares the name's bytes with ``nameBytes``. Confined to the connection's I/O
/// thread, like the ``DeliveryStaging`` that owns it.
///
/// A run stays valid while the center's routing generation is unchanged (observations added or removed bump
/// it) and until any frame other than a plain `NOTIFICATION` arrives: an `OVERFLOW` count, for one, must reach
/// the next notification of its subscription, which only the full path attaches.
///
/// Not copyable: it is used in place through ``DeliveryStaging/run`` for every notification read, and a copy
/// (which the optimizer made to call ``continues(name:generation:)`` through a pointer) retains and releases
/// each of its arrays.
struct NotificationRun: ~Copyable {
    /// The name as decoded (and so validated) from the run's first notification.
    private(set) var name = ""
    private(set) var nameBytes: [UInt8] = []
    /// The center's routing generation when ``observers`` were looked up.
    private(set) var generation: UInt64 = 0
    /// Every observation the name goes to, in routing order (possibly none); the run's references to them.
    private(set) var observers: [ObservationCore] = []
    /// The same observations, unretained, for ``lentObserver(at:)``: lent from `observers` without touching
    /// their reference counts, which the handlers' threads also change (a contended cache line per notification).
    private var borrowed: [Unmanaged<ObservationCore>] = []
    private(set) var isOpen = false

    /// Starts a run on `name` with the observations just looked up for it under `generation`.
    mutating func open(name: String, generation: UInt64, observers: some Sequence<ObservationCore>) {
        self.name = name
        nameBytes.removeAll(keepingCapacity: true)
        nameBytes.append(contentsOf: name.utf8)
        self.generation = generation
        self.observers.removeAll(keepingCapacity: true)
        self.observers.append(contentsOf: observers)
        borrowed.removeAll(keepingCapacity: true)
        borrowed.append(contentsOf: self.observers.lazy.map { Unmanaged.passUnretained($0) })
        isOpen = true
    }

    /// Ends the run; the next notification takes the full path.
    mutating func close() {
        guard isOpen else { return }
        isOpen = false
        // Do not keep cancelled observations alive until the next run.
        observers.removeAll(keepingCapacity: true)
        borrowed.removeAll(keepingCapacity: true)
    }

    /// The run's observation at `index` (routing order), unretained: the run holds it while it stays open.
    func lentObserver(at index: Int) -> Unmanaged<ObservationCore> { borrowed[index] }

    /// Whether a notification named by `bytes` continues the run, with routing unchanged since it opened.
    func continues(name bytes: UnsafeRawBufferPointer, generation current: UInt64) -> Bool {
        guard isOpen, generation == current, bytes.count == nameBytes.count else { return false }
        return nameBytes.withUnsafeBytes { $0.bytesEqual(bytes) }
    }
}
