#if canImport(Glibc)
import Glibc
#endif

/// `ROLE --key value --flag ...` as given on the command line (the same options as the C driver `nbench`).
struct Arguments {
    let role: String
    private var values: [String: String] = [:]

    init(_ arguments: [String] = CommandLine.arguments) {
        guard arguments.count >= 2 else {
            fail("usage: notify-bench sub|pub|ping|pong|inproc --address SOCKET --board FILE [--key value ...]")
        }
        role = arguments[1]
        var index = 2
        while index < arguments.count {
            let key = arguments[index]
            guard key.hasPrefix("--") else { fail("unexpected argument '\(key)'") }
            if index + 1 < arguments.count, !arguments[index + 1].hasPrefix("--") {
                values[String(key.dropFirst(2))] = arguments[index + 1]
                index += 2
            } else {
                values[String(key.dropFirst(2))] = ""
                index += 1
            }
        }
    }

    func string(_ key: String, _ defaultValue: String? = nil) -> String {
        if let value = values[key] { return value }
        if let defaultValue { return defaultValue }
        fail("--\(key) is required for \(role)")
    }

    func int(_ key: String, _ defaultValue: Int) -> Int {
        guard let text = values[key] else { return defaultValue }
        guard let value = Int(text) else { fail("--\(key) takes an integer, got '\(text)'") }
        return value
    }

    func double(_ key: String, _ defaultValue: Double) -> Double {
        guard let text = values[key] else { return defaultValue }
        guard let value = Double(text) else { fail("--\(key) takes a number, got '\(text)'") }
        return value
    }
}

func fail(_ message: String) -> Never {
    var standardError = StandardError()
    print("notify-bench: \(message)", to: &standardError)
    exit(1)
}

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) {
        var text = string
        text.withUTF8 { bytes in _ = Glibc.write(2, bytes.baseAddress, bytes.count) }
    }
}
