import NotifyBridge
import Testing

@Suite("Keys of the key-value bucket")
struct BucketKeyTests {
    @Test("ASCII names are their own keys; every other byte is =XX; the way back is exact")
    func roundTrip() {
        #expect(BucketKey.key(.state, name: "org.example.config") == "state.org.example.config")
        #expect(BucketKey.key(.retained, name: "org.example.config") == "retained.org.example.config")
        #expect(BucketKey.key(.state, name: "a/b=c") == "state.a=2Fb=3Dc")
        #expect(BucketKey.key(.state, name: "日本.x") == "state.=E6=97=A5=E6=9C=AC.x")
        for kind in BucketKey.Kind.allCases {
            for name in ["org.example.config", "a/b=c", "日本.😀", "x#y.z:w", "my-app_2.state", "A.B"] {
                let key = BucketKey.key(kind, name: name)
                #expect(key.utf8.allSatisfy { byte in
                    (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                        || [UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "="), UInt8(ascii: ".")].contains(byte)
                }, "\(key) holds only what NATS keys may")
                let parsed = BucketKey.parse(key)
                #expect(parsed?.kind == kind && parsed?.name == name, "\(key)")
            }
        }
    }

    @Test("keys this mapping did not write map to no name")
    func foreignKeys() {
        for key in ["other.x", "state.", "retained.", "state.a=2", "state.a=zz", "state.a=2f", "state.a/b", "statex.a", "x", "state.=61", "state.a=2E"] {
            #expect(BucketKey.parse(key) == nil, "\(key)")
        }
        #expect(BucketKey.parse("state.=FF") == nil, "not UTF-8")
    }
}
