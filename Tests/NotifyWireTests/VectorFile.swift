import Foundation
import NIOCore
import NotifyWire

/// One golden vector file from `protocol/vectors/` (format: `protocol/vectors/README.md`).
struct VectorFile: Sendable {
    enum Direction: String, Sendable {
        case clientToDaemon = "client-to-daemon"
        case daemonToClient = "daemon-to-client"
    }

    /// The file name, e.g. `hello.hex`.
    let fileName: String
    let direction: Direction
    /// The `expect-error` wire name, for invalid vectors.
    let expectedError: String?
    /// The receiver's frame length limit for this case.
    let maxFrameLength: UInt32
    /// The decoded bytes.
    let bytes: [UInt8]

    var buffer: ByteBuffer { ByteBuffer(bytes: bytes) }

    /// The limit a vector uses when it does not say: the daemon's default `max_frame_length`.
    static let defaultMaxFrameLength: UInt32 = 131_072

    /// `protocol/vectors`, found from this file's location (`Tests/NotifyWireTests/VectorFile.swift`).
    static let directory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // NotifyWireTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // package root
        .appendingPathComponent("protocol")
        .appendingPathComponent("vectors")

    /// The names of all `*.hex` files in ``directory``.
    static func allFileNames() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".hex") }
            .sorted()
    }

    static func load(_ fileName: String) throws -> VectorFile {
        let url = directory.appendingPathComponent(fileName)
        let text = try String(contentsOf: url, encoding: .utf8)
        return try parse(text, fileName: fileName)
    }

    static func parse(_ text: String, fileName: String) throws -> VectorFile {
        var direction: Direction?
        var expectedError: String?
        var maxFrameLength: UInt32?
        var hexDigits: [UInt8] = []

        for (lineIndex, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let lineNumber = lineIndex + 1
            let trimmed = line.drop(while: { $0 == " " || $0 == "\t" })
            if trimmed.first == "#" {
                let comment = trimmed.dropFirst().drop(while: { $0 == " " || $0 == "\t" })
                if let value = metadataValue(comment, key: "direction") {
                    guard direction == nil else { throw VectorFileError(fileName, lineNumber, "duplicate direction") }
                    guard let parsed = Direction(rawValue: value) else {
                        throw VectorFileError(fileName, lineNumber, "unknown direction '\(value)'")
                    }
                    direction = parsed
                } else if let value = metadataValue(comment, key: "expect-error") {
                    guard expectedError == nil else { throw VectorFileError(fileName, lineNumber, "duplicate expect-error") }
                    expectedError = value
                } else if let value = metadataValue(comment, key: "max-frame-length") {
                    guard maxFrameLength == nil, let parsed = UInt32(value) else {
                        throw VectorFileError(fileName, lineNumber, "bad or duplicate max-frame-length '\(value)'")
                    }
                    maxFrameLength = parsed
                }
                continue
            }
            let data = line.prefix(while: { $0 != "#" })
            for character in data where !(character == " " || character == "\t" || character == "\r") {
                guard let ascii = character.asciiValue, let digit = hexValue(ascii) else {
                    throw VectorFileError(fileName, lineNumber, "'\(character)' is not a hex digit")
                }
                hexDigits.append(digit)
            }
        }
        guard hexDigits.count % 2 == 0 else { throw VectorFileError(fileName, nil, "odd number of hex digits") }
        guard !hexDigits.isEmpty else { throw VectorFileError(fileName, nil, "no bytes") }
        guard let direction else { throw VectorFileError(fileName, nil, "missing '# direction:' line") }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hexDigits.count / 2)
        var index = 0
        while index < hexDigits.count {
            bytes.append(hexDigits[index] << 4 | hexDigits[index + 1])
            index += 2
        }
        return VectorFile(
            fileName: fileName, direction: direction, expectedError: expectedError,
            maxFrameLength: maxFrameLength ?? defaultMaxFrameLength, bytes: bytes)
    }

    private static func metadataValue(_ comment: Substring, key: String) -> String? {
        let prefix = key + ":"
        guard comment.hasPrefix(prefix) else { return nil }
        return comment.dropFirst(prefix.count).trimmingCharacters(in: .whitespaces)
    }

    private static func hexValue(_ ascii: UInt8) -> UInt8? {
        switch ascii {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): ascii - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): ascii - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): ascii - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

struct VectorFileError: Error, CustomStringConvertible {
    let description: String

    init(_ fileName: String, _ line: Int?, _ problem: String) {
        description = "\(fileName)\(line.map { ":\($0)" } ?? ""): \(problem)"
    }
}

/// Bytes as `00 ab ...` for readable failure messages.
func hex(_ bytes: some Sequence<UInt8>) -> String {
    bytes.map { byte in
        let digits = String(byte, radix: 16)
        return digits.count == 1 ? "0" + digits : digits
    }.joined(separator: " ")
}

extension ByteBuffer {
    /// The readable bytes as an array.
    var bytes: [UInt8] { Array(readableBytesView) }
}
