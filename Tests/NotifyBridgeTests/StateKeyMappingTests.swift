import NotifyBridge
import Testing

@Suite("State values' keys in the key-value bucket")
struct StateKeyMappingTests {
    @Test("ASCII names are their own keys; every other byte is =XX; the way back is exact")
    func roundTrip() {
        #expect(StateKeyMapping.key(forName: "org.example.config") == "state.org.example.config")
        #expect(StateKeyMapping.key(forName: "a/b=c") == "state.a=2Fb=3Dc")
        #expect(StateKeyMapping.key(forName: "日本.x") == "state.=E6=97=A5=E6=9C=AC.x")
        for name in ["org.example.config", "a/b=c", "日本.😀", "x#y.z:w", "my-app_2.state", "A.B"] {
            let key = StateKeyMapping.key(forName: name)
            #expect(key.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                    || [UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "="), UInt8(ascii: ".")].contains(byte)
            }, "\(key) holds only what NATS keys may")
            #expect(StateKeyMapping.name(forKey: key) == name)
        }
    }

    @Test("keys this mapping did not write map to no name")
    func foreignKeys() {
        for key in ["retained.x", "state.", "state.a=2", "state.a=zz", "state.a=2f", "state.a/b", "other"] {
            #expect(StateKeyMapping.name(forKey: key) == nil, "\(key)")
        }
        #expect(StateKeyMapping.name(forKey: "state.=FF") == nil, "not UTF-8")
    }

    @Test("patterns keep their wildcards")
    func patterns() {
        #expect(StateKeyMapping.key(forPattern: "org.*.>") == "state.org.*.>")
        #expect(StateKeyMapping.key(forPattern: ">") == "state.>")
        #expect(StateKeyMapping.key(forPattern: "a/b.*") == "state.a=2Fb.*")
    }
}
