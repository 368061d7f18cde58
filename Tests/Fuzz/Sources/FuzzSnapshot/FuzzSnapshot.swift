// Fuzzes the hand-over snapshot decoder, HandoverSnapshot(decoding:) (NotifyServer; compiled here from
// Sources/NotifyServer/Handover through symbolic links, as NotifyServer is not a product). A new daemon runs it on
// what its predecessor left; it must never crash on a damaged or hostile snapshot.
//
// Input: byte 0 chooses the mode. Even: the rest is the snapshot as stored. Odd: the rest is a snapshot's body,
// given a valid header and checksum here, so that the fuzzer reaches the body's fields instead of stopping at the
// checksum nearly every time.
// Properties:
// - decoding never crashes: it returns a snapshot or throws a HandoverError;
// - a snapshot in the current format that decodes encodes back to the very bytes it came from (the format has one
//   encoding of each value); one in the previous format (read for an upgrade) encodes in the current one; either
//   way the encoding decodes to an equal snapshot.
import FuzzSupport
import NotifyWire
import SnapshotUnderTest

@main
enum FuzzSnapshot {
    static func main() {
        fuzz(FuzzSnapshot.testOneInput)
    }

    static func testOneInput(_ input: UnsafeRawBufferPointer) {
        guard let mode = input.first else { return }
        let rest = Array(input.dropFirst())
        let bytes = mode & 1 == 0 ? rest : framed(body: rest)
        let snapshot: HandoverSnapshot
        do {
            snapshot = try HandoverSnapshot(decoding: bytes)
        } catch {
            require(!error.description.isEmpty, "an error without a reason")
            return
        }
        let encoded = snapshot.encoded()
        let isCurrentFormat = bytes.count > 9 && bytes[8] == 0 && UInt16(bytes[9]) == HandoverSnapshot.formatVersion
        require(!isCurrentFormat || encoded == bytes, "re-encoding changed the bytes: \(hex(bytes)) -> \(hex(encoded))")
        let again = try? HandoverSnapshot(decoding: encoded)
        require(again == snapshot, "the re-encoded snapshot decodes differently")
    }

    /// `body` with the snapshot header (the current format) and its checksum.
    static func framed(body: [UInt8]) -> [UInt8] {
        var bytes = Array("NTFYSNAP".utf8) + [0, UInt8(HandoverSnapshot.formatVersion), 0, 0]
        withUnsafeBytes(of: UInt64(body.count).bigEndian) { bytes += $0 }
        bytes += body
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in body {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        withUnsafeBytes(of: hash.bigEndian) { bytes += $0 }
        return bytes
    }
}
