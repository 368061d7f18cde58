import Foundation
import NotifyTestSupport

/// The executables the integration tests run, all built by SwiftPM into one products directory.
enum Tool: String, Sendable, CaseIterable {
    case notifyd
    case notifyctl
    case testPeer = "notify-test-peer"
    case bridge = "notifyd-bridge"
}

/// Locates SwiftPM's products directory (`.build/debug` or a `--scratch-path` equivalent).
///
/// Search order: `$NOTIFYD_BUILD_DIR`; the directories above the running test executable (`/proc/self/exe`,
/// then `CommandLine.arguments[0]`); `<package root>/.build/debug`, derived from this file's path.
enum BuildProducts {
    static let overrideVariable = "NOTIFYD_BUILD_DIR"

    /// Located once per test process.
    static let directory: Result<URL, TestFailure> = locate()

    /// The full path of `tool`, or an error saying where the tests looked.
    static func url(of tool: Tool) throws -> URL {
        try directory.get().appendingPathComponent(tool.rawValue)
    }

    private static func locate() -> Result<URL, TestFailure> {
        let fileManager = FileManager.default
        if let override = ProcessInfo.processInfo.environment[overrideVariable], !override.isEmpty {
            let url = URL(fileURLWithPath: override, isDirectory: true)
            if containsAllTools(url) { return .success(url) }
            return .failure(
                TestFailure(
                    "\(overrideVariable)=\(override) does not contain the executables "
                        + Tool.allCases.map(\.rawValue).joined(separator: ", ")))
        }

        var starts: [String] = []
        if let executable = try? fileManager.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            starts.append(executable)
        }
        if let argument = CommandLine.arguments.first, !argument.isEmpty {
            starts.append(URL(fileURLWithPath: argument).standardizedFileURL.path)
        }
        var searched: [String] = []
        for start in starts {
            var directory = URL(fileURLWithPath: start).deletingLastPathComponent().standardizedFileURL
            while true {
                searched.append(directory.path)
                if containsAllTools(directory) { return .success(directory) }
                let parent = directory.deletingLastPathComponent().standardizedFileURL
                if parent.path == directory.path { break }
                directory = parent
            }
        }

        // <root>/Tests/IntegrationTests/Harness/BuildProducts.swift → <root>/.build/debug
        let packageRoot = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let fallback = packageRoot.appendingPathComponent(".build/debug", isDirectory: true)
        searched.append(fallback.path)
        if containsAllTools(fallback) { return .success(fallback) }

        return .failure(
            TestFailure(
                """
                cannot find the built executables (\(Tool.allCases.map(\.rawValue).joined(separator: ", "))): \
                build them with `swift build --build-tests` or set \(overrideVariable) to the products directory. \
                Searched: \(searched.joined(separator: ", "))
                """))
    }

    private static func containsAllTools(_ directory: URL) -> Bool {
        Tool.allCases.allSatisfy { isExecutableFile(directory.appendingPathComponent($0.rawValue).path) }
    }

    private static func isExecutableFile(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else {
            return false
        }
        return FileManager.default.isExecutableFile(atPath: path)
    }
}
