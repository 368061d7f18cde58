import ArgumentParser
import Foundation
import Notify

extension Notifyctl.State {
    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print state values as they are set, one line each.",
            discussion: """
                Human form: name, value, and the setter's pid and uid (current values, printed first with \
                --current, say 'current' instead). With --json, one JSON object per line with the keys name, \
                value, current, and pid, uid and gid for a change. The line "watching ..." on standard error \
                comes once the daemon has every subscription: a value set after it is printed.
                """)

        @OptionGroup var connection: ConnectionOptions

        @Argument(help: "One or more names or patterns ('*' one label, '>' the rest: 'org.example.>').")
        var names: [String]

        @Flag(name: .long, help: "Start with the current value of each matching name that has one.")
        var current = false

        @Option(name: .long, help: "Exit 0 after this many lines.")
        var count: Int?

        @Flag(name: .long, help: "Print one JSON object per line.")
        var json = false

        func validate() throws {
            if names.isEmpty { throw ValidationError("give at least one name or pattern") }
            if let count, count < 1 { throw ValidationError("--count must be at least 1") }
        }

        func run() async throws {
            try await reportingFailures {
                for name in names { try NotifyCenter.validate(pattern: name) }
                let center = try await connection.connect()
                let (stream, continuation) = AsyncStream<StateChange>.makeStream()
                var observations: [Observation] = []
                for name in names {
                    observations.append(
                        try center.observeStates(name, sendingCurrent: current, on: .immediate) { continuation.yield($0) })
                }
                try await center.synchronize()
                StandardStreams.error("watching \(names.joined(separator: ", "))")
                var printed = 0
                var previous: StateChange?
                for await change in stream {
                    // Overlapping patterns each hand the same change to this stream, one right after the other.
                    if change == previous { continue }
                    previous = change
                    StandardStreams.output(try line(change))
                    printed += 1
                    if let count, printed >= count { break }
                }
                withExtendedLifetime(observations) {}
                await center.close()
            }
        }

        private func line(_ change: StateChange) throws -> String {
            let name = TerminalText.escaped(change.name)
            guard json else {
                guard let sender = change.sender, !change.isCurrent else { return "\(name) \(change.value) current" }
                return "\(name) \(change.value) (pid \(sender.pid) uid \(sender.uid))"
            }
            var object = #"{"current":\#(change.isCurrent),"name":\#(try JSONOutput.string(change.name)),"#
            if let sender = change.sender, !change.isCurrent {
                object += #""gid":\#(sender.gid),"pid":\#(sender.pid),"uid":\#(sender.uid),"#
            }
            return object + #""value":\#(change.value)}"#
        }
    }
}
