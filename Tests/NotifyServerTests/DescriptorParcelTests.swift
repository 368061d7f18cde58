#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Testing

@testable import NotifyServer

/// Client sockets go into systemd's store as a few parcels: every one comes back, in order, still connected.
@Suite("Descriptor parcels")
struct DescriptorParcelTests {
    /// `count` connected socket pairs.
    static func pairs(_ count: Int) throws -> [(CInt, CInt)] {
        try (0..<count).map { _ in
            var pair: [CInt] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0 else {
                throw TestFailure("socketpair: \(errno)")
            }
            return (pair[0], pair[1])
        }
    }

    struct TestFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    @Test("every descriptor comes back in order, after the sender closed its own", arguments: [Int.max, 1])
    func roundTrip(messagesPerParcel: Int) throws {
        let pairs = try Self.pairs(600)
        defer { for (_, peer) in pairs { close(peer) } }
        let parcels = try DescriptorParcel.pack(pairs.map(\.0), messagesPerParcel: messagesPerParcel)
        // 600 descriptors take three messages: one parcel, or three with one message each; two ends each.
        #expect(parcels.count == (messagesPerParcel == 1 ? 6 : 2))
        // systemd's store drops an entry that polls as hung up or in error: none may.
        for parcel in parcels {
            var entry = pollfd(fd: parcel, events: 0, revents: 0)
            #expect(poll(&entry, 1, 0) == 0, "a parcel's end polls as \(entry.revents) (hang-up: \(POLLHUP))")
        }
        for (ours, _) in pairs { close(ours) }  // only the parcels keep them open now
        let (descriptors, failure) = DescriptorParcel.unpack(parcels)
        #expect(failure == nil)
        #expect(descriptors.count == 600)
        for (index, descriptor) in descriptors.enumerated() {
            var byte = UInt8(index % 251)
            #expect(write(descriptor, &byte, 1) == 1)
            var received: UInt8 = 0
            #expect(read(pairs[index].1, &received, 1) == 1)
            #expect(received == byte, "descriptor \(index) is connected to another socket")
            close(descriptor)
        }
    }

    @Test("no descriptors, no parcels")
    func empty() throws {
        #expect(try DescriptorParcel.pack([]).isEmpty)
        #expect(DescriptorParcel.unpack([]).descriptors.isEmpty)
    }
}
