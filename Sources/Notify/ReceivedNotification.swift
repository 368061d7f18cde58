import Foundation
import NotifyWire

/// A notification as an observer receives it.
///
/// Notifications read together from the daemon share one block of payload bytes (at most 16 KiB, or one
/// larger payload), which lives as long as any of them: to keep many notifications for a long time, keep
/// their ``payload`` arrays instead.
public struct ReceivedNotification: Sendable, Hashable, CustomReflectable {
    /// Where the payload bytes are.
    ///
    /// `@unchecked Sendable` for ``PayloadBlock``, a `ManagedBuffer` (which never is): a block's bytes are only
    /// read once a notification referring to them exists, and never written again (see ``PayloadBlock``).
    enum Storage: @unchecked Sendable {
        case array([UInt8])
        /// A range of a block shared with the other notifications read in the same burst.
        case block(PayloadBlock, offset: Int, count: Int)
    }

    /// The name it was posted under.
    public var name: String
    var storage: Storage
    /// The daemon's sequence number for the post: increases in delivery order; 0 for process-local names.
    public var sequence: UInt64
    /// Who posted it (pid, uid, gid), verified by the kernel, not claimed by the poster.
    public var sender: SenderCredentials
    /// Under the `coalesce` policy: how many earlier notifications on this name the daemon merged into this
    /// one while the observer could not keep up (0 normally).
    public var mergedCount: UInt64 {
        get { details?.values.mergedCount ?? 0 }
        set { updateDetails { $0.mergedCount = newValue } }
    }
    /// Under the `queue` policy: how many notifications of this subscription the daemon dropped just before
    /// this one (0 normally).
    public var droppedBefore: UInt64 {
        get { details?.values.droppedBefore ?? 0 }
        set { updateDetails { $0.droppedBefore = newValue } }
    }
    /// Whether this is the retained notification delivered as the current value when observing began
    /// (``ObservationOptions/receivesCurrentValue``), rather than a new post.
    public var isRetained: Bool {
        get { details?.values.isRetained ?? false }
        set { updateDetails { $0.isRetained = newValue } }
    }
    /// Whether the post was made with `retain` (it became its name's retained notification). Only reported on
    /// observations with ``ObservationOptions/marksRetainedPosts``; `false` on others, and for the current value
    /// (see ``isRetained``).
    public var isRetainedPost: Bool {
        get { details?.values.isRetainedPost ?? false }
        set { updateDetails { $0.isRetainedPost = newValue } }
    }
    /// For a notification relayed from another host (by `notifyd-bridge`): where it was first posted; `nil` for a
    /// local post. ``sender`` is then the relay's process.
    public var origin: NotificationOrigin? {
        get { details?.values.origin }
        set { updateDetails { $0.origin = newValue } }
    }

    /// The fields above, which most notifications leave at their defaults: boxed, and `nil` while they all are,
    /// so that a notification stays small (it is moved into a batch and out to its handler: 80 bytes rather
    /// than 144).
    private(set) var details: Details?

    struct DetailValues: Equatable {
        var mergedCount: UInt64 = 0
        var droppedBefore: UInt64 = 0
        var isRetained = false
        var isRetainedPost = false
        var origin: NotificationOrigin?
    }

    /// Immutable, so copies of a notification can share it; a change makes a new one.
    final class Details: Sendable {
        let values: DetailValues
        init(_ values: DetailValues) { self.values = values }
    }

    private mutating func updateDetails(_ change: (inout DetailValues) -> Void) {
        let current = details?.values ?? DetailValues()
        var values = current
        change(&values)
        // Setting a field to what it is (a drop count of 0 for each observer, say) allocates nothing.
        guard values != current else { return }
        details = values == DetailValues() ? nil : Details(values)
    }

    /// Whether any of the rarely set fields differs from its default (the box exists).
    var hasDetails: Bool { details != nil }

    /// Creates a notification value (the library creates these; tests and process-local posts may too).
    public init(name: String, payload: [UInt8], sequence: UInt64, sender: SenderCredentials) {
        self.init(name: name, storage: .array(payload), sequence: sequence, sender: sender)
    }

    init(name: String, storage: Storage, sequence: UInt64, sender: SenderCredentials) {
        self.name = name
        self.storage = storage
        self.sequence = sequence
        self.sender = sender
    }

    /// The payload bytes as posted.
    ///
    /// Each read makes an array of them; ``withPayloadBytes(_:)``, ``payloadString`` and ``payloadData`` read
    /// them without one.
    public var payload: [UInt8] {
        get {
            switch storage {
            case .array(let bytes): bytes
            case .block(let block, let offset, let count): block.withBytes(offset: offset, count: count) { Array($0) }
            }
        }
        set { storage = .array(newValue) }
    }

    /// The number of payload bytes.
    public var payloadCount: Int {
        switch storage {
        case .array(let bytes): bytes.count
        case .block(_, _, let count): count
        }
    }

    /// Calls `body` with the payload bytes, without copying them. The buffer is only valid inside `body`.
    public func withPayloadBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        switch storage {
        case .array(let bytes): try bytes.withUnsafeBytes(body)
        case .block(let block, let offset, let count): try block.withBytes(offset: offset, count: count, body)
        }
    }

    /// The payload as text, or `nil` if it is not valid UTF-8.
    public var payloadString: String? {
        withPayloadBytes { String(validating: $0, as: UTF8.self) }
    }

    /// The payload as `Data`.
    public var payloadData: Data { withPayloadBytes { Data($0) } }

    /// The notification's fields as `print` and `dump` show them: the public ones, with the payload's size.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "name": name, "sequence": sequence, "sender": sender, "payloadCount": payloadCount,
                "mergedCount": mergedCount, "droppedBefore": droppedBefore, "isRetained": isRetained,
                "isRetainedPost": isRetainedPost, "origin": origin as Any,
            ],
            displayStyle: .struct)
    }

    /// Whether two notifications have the same name, sequence, sender, loss counters, retained flags, origin and
    /// payload bytes.
    public static func == (lhs: ReceivedNotification, rhs: ReceivedNotification) -> Bool {
        guard lhs.name == rhs.name, lhs.sequence == rhs.sequence, lhs.sender == rhs.sender,
            lhs.mergedCount == rhs.mergedCount, lhs.droppedBefore == rhs.droppedBefore,
            lhs.isRetained == rhs.isRetained, lhs.isRetainedPost == rhs.isRetainedPost, lhs.origin == rhs.origin,
            lhs.payloadCount == rhs.payloadCount
        else { return false }
        return lhs.withPayloadBytes { left in rhs.withPayloadBytes { right in left.elementsEqual(right) } }
    }

    /// Hashes the fields ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(sequence)
        hasher.combine(sender)
        hasher.combine(mergedCount)
        hasher.combine(droppedBefore)
        hasher.combine(isRetained)
        hasher.combine(isRetainedPost)
        hasher.combine(origin)
        hasher.combine(payloadCount)
        withPayloadBytes { hasher.combine(bytes: $0) }
    }
}
