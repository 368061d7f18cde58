#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CLibFuzzer
import NIOCore

/// The callback libFuzzer calls with each input.
public typealias FuzzCallback = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32

/// Runs libFuzzer with this process's arguments (`-runs=`, `-max_total_time=`, corpus directories, …) and
/// `callback` for each input; returns libFuzzer's exit status. Called from each target's `@main`.
public func runFuzzer(_ callback: FuzzCallback) -> Int32 {
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    return LLVMFuzzerRunDriver(&argc, &argv, callback)
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
