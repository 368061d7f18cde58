import NotifyWire
import Testing

@Suite("Delivery policy codes, queue limits and strength")
struct DeliveryPolicyCodingTests {
    /// PROTOCOL.md § 6.2: the `policy` byte and `queue_limit` of each policy.
    static let encodings: [(DeliveryPolicy, UInt8, UInt32, String)] = [
        (.coalesce, 0, 0, "coalesce"),
        (.queue(limit: 1), 1, 1, "queue(1)"),
        (.queue(limit: 100), 1, 100, "queue(100)"),
        (.queue(limit: .max), 1, .max, "queue(4294967295)"),
        (.disconnect, 2, 0, "disconnect"),
    ]

    @Test("codes round-trip", arguments: encodings)
    func roundTrip(policy: DeliveryPolicy, code: UInt8, queueLimit: UInt32, description: String) {
        #expect(policy.code == code)
        #expect(policy.queueLimit == queueLimit)
        #expect(policy.description == description)
        #expect(DeliveryPolicy(code: code, queueLimit: queueLimit) == policy)
        // And through SUBSCRIBE's fields.
        let subscribe = ClientFrame.Subscribe(requestID: 1, subscriptionID: 2, policy: policy, pattern: "a")
        #expect(subscribe.policyCode == code)
        #expect(subscribe.queueLimit == queueLimit)
        #expect(subscribe.policy == policy)
    }

    static let invalidCombinations: [(UInt8, UInt32)] = [
        (0, 1), (0, .max),  // coalesce takes no limit
        (1, 0),  // queue needs a limit of at least 1
        (2, 1), (2, .max),  // disconnect takes no limit
        (3, 0), (3, 1), (0x80, 0), (0xFF, 0), (0xFF, .max),  // undefined policies
    ]

    @Test("invalid policy fields describe no policy", arguments: invalidCombinations)
    func invalid(code: UInt8, queueLimit: UInt32) {
        #expect(DeliveryPolicy(code: code, queueLimit: queueLimit) == nil)
        let subscribe = ClientFrame.Subscribe(
            requestID: 1, subscriptionID: 2, flags: [], policyCode: code, queueLimit: queueLimit, pattern: "a")
        #expect(subscribe.policy == nil)
        // Still a well-formed frame: it decodes (the daemon answers it with invalid-request).
        let frame = ClientFrame.subscribe(subscribe)
        #expect(decodeOne(frame.encodedBytes, as: ClientFrame.self).frame == frame)
    }

    @Test("exactly the documented combinations are valid")
    func exhaustiveSmallValues() {
        for code in UInt8.min...UInt8.max {
            for limit: UInt32 in [0, 1, 2, 1_000, .max] {
                let valid = (code == 0 && limit == 0) || (code == 1 && limit >= 1) || (code == 2 && limit == 0)
                #expect((DeliveryPolicy(code: code, queueLimit: limit) != nil) == valid, "policy \(code) limit \(limit)")
            }
        }
    }

    @Test("the strongest policy: disconnect, then queue with the larger limit, then coalesce")
    func strength() {
        let ordered: [DeliveryPolicy] = [.coalesce, .queue(limit: 1), .queue(limit: 10), .queue(limit: .max), .disconnect]
        for (weaker, stronger) in zip(ordered, ordered.dropFirst()) {
            #expect(weaker.strength < stronger.strength, "\(weaker) < \(stronger)")
        }
    }

    @Test("SUBSCRIBE defaults: no flags, coalesce")
    func subscribeDefaults() {
        let subscribe = ClientFrame.Subscribe(requestID: 1, subscriptionID: 2, pattern: "a")
        #expect(subscribe.flags == [])
        #expect(subscribe.policy == .coalesce)
        #expect(subscribe.policyCode == 0 && subscribe.queueLimit == 0)
    }
}
