#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CLibFuzzer
import NIOCore

/// The one target a fuzzing process runs: libFuzzer's callback is a C function pointer and cannot capture it.
/// Set once, before libFuzzer starts, and read only from libFuzzer's single fuzzing thread.
nonisolated(unsafe) private var currentTarget: ((UnsafeRawBufferPointer) -> Void)?

/// Runs libFuzzer with this process's arguments (`-runs=`, `-max_total_time=`, corpus directories, …), calling
/// `target` with each input, and exits with libFuzzer's status. Each target's `@main` calls it.
public func fuzz(_ target: @escaping (UnsafeRawBufferPointer) -> Void) -> Never {
    currentTarget = target
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        currentTarget?(fuzzInput(data, size))
        return 0
    })
}

/// The input as a buffer (empty when libFuzzer passes a null pointer).
@inline(__always)
public func fuzzInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> UnsafeRawBufferPointer {
    guard let data, size > 0 else { return UnsafeRawBufferPointer(start: nil, count: 0) }
    return UnsafeRawBufferPointer(start: data, count: size)
}

/// Fails the run when a property does not hold: prints what was expected and aborts, so libFuzzer saves the
/// input as a crash artifact and exits non-zero.
@inline(__always)
public func require(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
    file: StaticString = #fileID, line: UInt = #line
) {
    if !condition() {
        let text = "\n*** property violated (\(file):\(line)): \(message())\n"
        var bytes = Array(text.utf8)
        _ = write(2, &bytes, bytes.count)
        abort()
    }
}

/// Lower-case hex of some bytes, for messages.
public func hex<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
    var text = ""
    for byte in bytes {
        let digits = String(byte, radix: 16)
        text += digits.count == 1 ? "0" + digits : digits
    }
    return text
}

/// A buffer's readable bytes as an array.
public func bytes(of buffer: ByteBuffer) -> [UInt8] {
    buffer.getBytes(at: buffer.readerIndex, length: buffer.readableBytes) ?? []
}

/// Reads a fuzz input front to back; past the end it yields zeros.
public struct FuzzReader {
    public let bytes: UnsafeRawBufferPointer
    public private(set) var position = 0

    public init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    public var remaining: Int { bytes.count - position }

    public mutating func byte() -> UInt8 {
        guard position < bytes.count else { return 0 }
        defer { position += 1 }
        return bytes[position]
    }

    /// The rest of the input.
    public mutating func rest() -> UnsafeRawBufferPointer {
        defer { position = bytes.count }
        return UnsafeRawBufferPointer(rebasing: bytes[position...])
    }
}
