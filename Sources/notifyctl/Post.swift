import ArgumentParser
import Foundation
import Notify

extension Notifyctl {
    struct Post: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Post a notification.",
            discussion: "Exits 0 once the daemon has accepted the notification.")

        @OptionGroup var connection: ConnectionOptions

        @Argument(help: "The notification name, e.g. com.example.hello.")
        var name: String

        @Argument(help: "The payload text (UTF-8). Omit for an empty payload.")
        var payload: String?

        @Option(name: .long, help: "Read the payload from this file ('-' reads standard input).")
        var file: String?

        @Flag(name: .long, help: "Print how many subscribers the notification was delivered to.")
        var wait = false

        @Flag(name: .long, help: "Keep it as the name's current value for later 'listen --current'.")
        var retain = false

        func validate() throws {
            if payload != nil && file != nil {
                throw ValidationError("give the payload either as an argument or with --file, not both")
            }
        }

        func run() async throws {
            try await reportingFailures {
                try NotifyCenter.validate(name: name)
                let bytes = try readPayload()
                let center = try await connection.connect()
                let receipt = try await center.postAndWait(name, payload: bytes, retain: retain)
                if wait {
                    let noun = receipt.deliveredCount == 1 ? "subscriber" : "subscribers"
                    StandardStreams.output("delivered to \(receipt.deliveredCount) \(noun) (sequence \(receipt.sequence))")
                }
                await center.close()
            }
        }

        private func readPayload() throws -> [UInt8] {
            guard let file else { return Array((payload ?? "").utf8) }
            if file == "-" { return Array(FileHandle.standardInput.readDataToEndOfFile()) }
            guard let data = FileManager.default.contents(atPath: file) else {
                throw CommandFailure("cannot read payload file \(file)")
            }
            return Array(data)
        }
    }
}
