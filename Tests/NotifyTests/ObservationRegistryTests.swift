import Atomics
import NIOConcurrencyHelpers
import NotifyWire
import Testing

@testable import Notify

/// The registry's routing (one lookup for the daemon's notifications and `self.` posts), its replay list, and
/// the staging slots it hands out, without a daemon.
@Suite("Observation registry")
struct ObservationRegistryTests {
    private static let sender = Notify.SenderCredentials(pid: 1, uid: 0, gid: 0)

    private static func add(
        _ registry: inout ObservationRegistry, _ pattern: String, policy: Notify.DeliveryPolicy = .coalesce,
        executor: any DeliveryExecutor = ImmediateExecutor()
    ) throws -> ObservationRegistry.Added {
        let key = SubscriptionKey(pattern: pattern, policy: policy)
        return registry.add(try NotificationPattern(pattern), key: key) { id, slot in
            ObservationCore(id: id, name: pattern, key: key, stagingSlot: slot, executor: executor, handler: { _ in })
        }
    }

    private static func observers(
        _ registry: inout ObservationRegistry, of name: String, takingDrops: Bool = true
    ) -> [(name: String, drops: UInt64)] {
        var targets: [(ObservationCore, UInt64)] = []
        registry.collectObservers(of: name, takingDrops: takingDrops, into: &targets)
        return targets.map { ($0.0.name, $0.1) }
    }

    @Test("a name reaches its exact observations and the matching patterns; OVERFLOW counts go to the next one")
    func routing() throws {
        var registry = ObservationRegistry(generation: ManagedAtomic(0))
        let exact = try Self.add(&registry, "org.example.a")
        let shared = try Self.add(&registry, "org.example.a")
        let pattern = try Self.add(&registry, "org.example.*")
        _ = try Self.add(&registry, "org.other.*")
        #expect(exact.isNewSubscription && !shared.isNewSubscription)
        #expect(shared.subscriptionID == exact.subscriptionID)
        #expect(Self.observers(&registry, of: "org.example.a").map(\.name) == ["org.example.a", "org.example.a", "org.example.*"])
        #expect(Self.observers(&registry, of: "org.example.b").map(\.name) == ["org.example.*"])
        #expect(Self.observers(&registry, of: "net.example.a").isEmpty)

        #expect(registry.recordOverflow(subscriptionID: pattern.subscriptionID, dropped: 3) == "org.example.*")
        #expect(registry.recordOverflow(subscriptionID: 0, dropped: 5) == nil, "connection-wide")
        #expect(Self.observers(&registry, of: "org.example.b", takingDrops: false).map(\.drops) == [0], "a local post leaves the count")
        #expect(Self.observers(&registry, of: "org.example.b").map(\.drops) == [3])
        #expect(Self.observers(&registry, of: "org.example.b").map(\.drops) == [0], "counted once")
    }

    @Test("removing the last observation ends the subscription; the replay list leaves out self. names")
    func removalAndReplay() throws {
        let generation = ManagedAtomic<UInt64>(0)
        var registry = ObservationRegistry(generation: generation)
        let first = try Self.add(&registry, "org.example.a")
        let second = try Self.add(&registry, "org.example.a", policy: .queue(limit: 10))
        let local = try Self.add(&registry, "self.local")
        #expect(generation.load(ordering: .relaxed) == 3)
        #expect(Self.observers(&registry, of: "self.local", takingDrops: false).map(\.name) == ["self.local"])
        #expect(Set(registry.daemonSubscriptions.map(\.id)) == [first.subscriptionID, second.subscriptionID])

        #expect(registry.remove(first.core) == first.subscriptionID)
        #expect(registry.remove(local.core) == local.subscriptionID)
        #expect(generation.load(ordering: .relaxed) == 5)
        #expect(registry.daemonSubscriptions.map(\.key) == [SubscriptionKey(pattern: "org.example.a", policy: .queue(limit: 10))])
        #expect(Self.observers(&registry, of: "org.example.a").count == 1)
    }

    @Test("staging slots are reused, and a batch still staged in a reused slot goes to its own observation first")
    func stagingSlots() throws {
        var registry = ObservationRegistry(generation: ManagedAtomic(0))
        let old = KeptJobs()
        let removed = try Self.add(&registry, "org.example.a", executor: old)
        _ = try Self.add(&registry, "org.example.b")
        #expect(registry.remove(removed.core) != nil)
        let new = KeptJobs()
        let reusing = try Self.add(&registry, "org.example.c", executor: new)
        #expect(reusing.core.stagingSlot == removed.core.stagingSlot)

        let staging = DeliveryStaging()
        let notification = ReceivedNotification(name: "org.example.a", payload: [], sequence: 1, sender: Self.sender)
        staging.add(notification, for: removed.core)
        staging.add(notification, for: reusing.core)
        #expect(old.count == 1, "handed over when the slot changed hands")
        #expect(new.count == 0)
        staging.flush()
        #expect(old.count == 1)
        #expect(new.count == 1)
    }
}

/// Keeps jobs instead of running them, so a test can count them.
private final class KeptJobs: DeliveryExecutor {
    private let jobs = NIOLockedValueBox<[@Sendable () -> Void]>([])

    var count: Int { jobs.withLockedValue { $0.count } }

    func enqueue(_ job: @escaping @Sendable () -> Void) {
        jobs.withLockedValue { $0.append(job) }
    }
}
