import Foundation
import Testing

extension Integration {
    /// Typed messages between separate client-library processes, and what other tools see of them.
    @Suite("typed messages across processes")
    struct TypedMessageTests {
        @Test("a typed message posted by one process decodes in another; a malformed payload is reported")
        func typedRoundTrip() async throws {
            try await withDaemon { scope, _ in
                let observer = try scope.launch(.testPeer, ["observe-typed", "--count", "3", "--socket", scope.socketPath])
                try await observer.waitForLine(containing: "ready", on: .stdout)
                let json = try scope.launch(
                    .notifyctl, ["listen", "peer.typed.message", "--count", "1", "--json", "--socket", scope.socketPath])
                try await json.waitForLine(containing: "listening", on: .stderr)

                let poster = try await scope.run(.testPeer, ["post-typed", "--count", "2", "--socket", scope.socketPath])
                #expect(poster.termination == .exited(0), "\(poster.diagnostics)")
                // A plain-text post under the typed name cannot decode: the observer must say so, not crash.
                let garbage = try await scope.run(
                    .notifyctl, ["post", "peer.typed.message", "not json", "--socket", scope.socketPath])
                #expect(garbage.termination == .exited(0), "\(garbage.diagnostics)")

                #expect(try await observer.waitForExit() == .exited(0), "\(observer.diagnostics)")
                let lines = observer.stdoutLines.filter { $0 != "ready" }
                #expect(lines.count == 3, "\(observer.diagnostics)")
                #expect(lines.prefix(2) == ["message 0 typed-0", "message 1 typed-1"], "\(observer.diagnostics)")
                #expect(lines.last?.hasPrefix("decode-failure invalid JSON") == true, "\(observer.diagnostics)")

                // notifyctl listen --json shows the typed message decoded under "message".
                #expect(try await json.waitForExit() == .exited(0), "\(json.diagnostics)")
                let line = try #require(json.stdoutLines.first)
                let object = try #require(
                    try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
                let message = try #require(object["message"] as? [String: Any], "\(line)")
                #expect(message["index"] as? Int == 0)
                #expect(message["text"] as? String == "typed-0")
                #expect((message["at"] as? String)?.hasSuffix("Z") == true, "dates are ISO 8601 in UTC: \(line)")
            }
        }
    }
}
