/// Text that came from another process, made safe to print on one line of a terminal.
///
/// Client names, commands, payloads and names are chosen by other users: an escape sequence in one could
/// repaint or retitle the terminal of the root user who runs `notifyctl clients`, and a newline could forge a
/// table row. Every such string goes through ``escaped(_:)`` before it is printed as text (JSON output through
/// ``JSONOutput/terminalSafe(_:)``, which escapes what the JSON encoders leave raw).
enum TerminalText {
    /// `text` with C0 and C1 control characters, DEL, and the bidirectional overrides that reorder what
    /// follows them, shown as escapes (`\n`, `\t`, `\r`, `\\`, `\u{1b}`): one line, nothing the terminal acts on.
    static func escaped(_ text: String) -> String {
        var result = ""
        result.unicodeScalars.reserveCapacity(text.unicodeScalars.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case "\\": result += "\\\\"
            case _ where actsOnTerminal(scalar):
                result += "\\u{" + String(scalar.value, radix: 16) + "}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// Whether a terminal acts on `scalar` (or shows it as something else): C0 and C1 controls, DEL, and the
    /// characters below.
    static func actsOnTerminal(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00..<0x20, 0x7F..<0xA0: true
        // Bidirectional marks, embeddings, overrides and isolates, the line and paragraph separators, and the
        // zero-width no-break space.
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029, 0xFEFF: true
        default: false
        }
    }
}
