#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CNotifyPosix

/// Many descriptors carried as a few: each parcel is a `SOCK_SEQPACKET` socket pair, one end's queue holding
/// `SCM_RIGHTS` messages of up to 253 descriptors each; the kernel keeps them open while they are in flight, with
/// no process holding them. Both ends are carried: systemd drops a stored descriptor that reports a hang-up,
/// which one end would as soon as the other closed.
///
/// systemd's file descriptor store compares every descriptor it is given with every one it holds (to drop
/// duplicates), so storing each client socket costs a restart time quadratic in the connections; storing a few
/// parcels instead costs a handful of `sendmsg` calls (`protocol/PROTOCOL.md` § 15.2).
package enum DescriptorParcel {
    /// The most descriptors one `SCM_RIGHTS` message may carry (the kernel's `SCM_MAX_FD`).
    package static let descriptorsPerMessage = 253

    /// Puts `descriptors` into parcels, in order, and returns the parcels' ends, two per parcel (the caller stores
    /// them all, then closes them; closing the inputs is the caller's too). A parcel takes messages until its
    /// socket's send buffer is full, then the next one starts.
    ///
    /// - Parameter messagesPerParcel: at most this many messages in one parcel (tests use a small number).
    package static func pack(_ descriptors: [CInt], messagesPerParcel: Int = .max) throws(ReplaceChannel.Failure) -> [CInt] {
        var parcels: [CInt] = []
        var writer: CInt = -1
        var messages = 0
        var start = 0
        do throws(ReplaceChannel.Failure) {
            while start < descriptors.count {
                if writer < 0 || messages >= messagesPerParcel {
                    var pair: [CInt] = [-1, -1]
                    let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
                    guard socketpair(AF_UNIX, type, 0, &pair) == 0 else { throw .system("socketpair") }
                    _ = fcntl(pair[1], F_SETFL, fcntl(pair[1], F_GETFL) | O_NONBLOCK)
                    parcels += pair
                    writer = pair[1]
                    messages = 0
                }
                let end = min(start + descriptorsPerMessage, descriptors.count)
                let sent = descriptors[start..<end].withUnsafeBufferPointer { fds in
                    notifyd_send_with_fds(writer, [UInt8(ascii: "C")], 1, fds.baseAddress, fds.count)
                }
                if sent == 1 {
                    start = end
                    messages += 1
                } else if errno == EAGAIN || errno == ENOBUFS, messages > 0 {
                    messages = messagesPerParcel  // this parcel is full: the next message starts another
                } else {
                    throw .system("cannot put descriptors into a parcel")
                }
            }
        } catch {
            for parcel in parcels { close(parcel) }
            throw error
        }
        return parcels
    }

    /// The descriptors in `parcels` (both ends of each, in any order), in order; closes the parcels. A parcel
    /// that cannot be read to its end is reported in `failure` (what it held up to there is returned).
    package static func unpack(_ parcels: [CInt]) -> (descriptors: [CInt], failure: String?) {
        var descriptors: [CInt] = []
        var failure: String?
        var passed = [CInt](repeating: -1, count: descriptorsPerMessage)
        var byte: UInt8 = 0
        for parcel in parcels {
            defer { close(parcel) }
            // Nothing more is written: the queue ends where a read finds it empty (EAGAIN), or with the end of
            // the stream if the other end is closed. The writing end's own queue is empty.
            _ = fcntl(parcel, F_SETFL, fcntl(parcel, F_GETFL) | O_NONBLOCK)
            while true {
                var count = 0
                let received = passed.withUnsafeMutableBufferPointer { fds in
                    notifyd_receive_with_fds(parcel, &byte, 1, fds.baseAddress, fds.count, &count)
                }
                descriptors += passed.prefix(count)
                if received > 0 { continue }
                if received < 0, errno != EAGAIN {
                    failure = "a parcel of descriptors cannot be read: \(String(cString: strerror(errno)))"
                }
                break
            }
        }
        return (descriptors, failure)
    }
}
