// swift-tools-version:6.0
import PackageDescription

// libFuzzer targets for notifyd (issue 15). Not part of the root package, so a plain `swift build` there is
// unaffected; `make fuzz-smoke` / `make fuzz` build this with `-sanitize=fuzzer` (see README, "Fuzzing").
//
// Every target is an executable whose `@main` calls `LLVMFuzzerRunDriver` (swiftlang/swift-package-manager#8731):
// SwiftPM links an executable's own entry point, so libFuzzer's `main` cannot be used.
//
// The root package exports only the `Notify` library product, whose API is its own types: NotifyWire and
// NotifyServer have `package` access, which no other package can use. So this package compiles them from the root
// package's sources through symbolic links (the same files, never copies): `FuzzedNotifyWire` is Sources/NotifyWire
// (Sources/NotifyWire -> ../../../Sources/NotifyWire; NotifyTypes, which it re-exports, likewise), and `ConfigurationUnderTest` is NotifyServer's
// `AccessConfiguration.swift`.
//
// A target may not be named NotifyWire here, as the root package's NotifyWire is in the graph too (the `Notify`
// product depends on it; only FuzzTypedMessage, which fuzzes Notify's public API, uses that product), and SwiftPM's
// `moduleAliases` does not reach a target that is not a product. So the targets that fuzz the protocol, and
// `AccessConfiguration.swift`, read `import NotifyWire` as `FuzzedNotifyWire` (`-module-alias`).
let wireAlias: [SwiftSetting] = [
    .unsafeFlags(["-module-alias", "NotifyWire=FuzzedNotifyWire", "-module-alias", "NotifyTypes=FuzzedNotifyTypes"])
]
let fuzzDependencies: [Target.Dependency] = [
    "FuzzSupport",
    "FuzzedNotifyWire",
    .product(name: "NIOCore", package: "swift-nio"),
]

let package = Package(
    name: "notifyd-fuzz",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "notifyd", path: "../.."),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
    ],
    targets: [
        // Declares LLVMFuzzerRunDriver (libclang_rt.fuzzer, linked by -sanitize=fuzzer).
        .target(name: "CLibFuzzer"),
        .target(
            name: "FuzzSupport",
            dependencies: ["CLibFuzzer", .product(name: "NIOCore", package: "swift-nio")]
        ),
        // The wire protocol and the vocabulary it re-exports, from the root package's sources (symbolic links to
        // ../../Sources/NotifyWire and ../../Sources/NotifyTypes).
        .target(name: "FuzzedNotifyTypes", path: "Sources/NotifyTypes"),
        .target(
            name: "FuzzedNotifyWire",
            dependencies: ["FuzzedNotifyTypes", .product(name: "NIOCore", package: "swift-nio")],
            path: "Sources/NotifyWire",
            swiftSettings: wireAlias
        ),
        .target(name: "ConfigurationUnderTest", dependencies: ["FuzzedNotifyWire"], swiftSettings: wireAlias),
        // The hand-over snapshot's format (Sources/NotifyServer/Handover/HandoverSnapshot*.swift, linked).
        .target(name: "SnapshotUnderTest", dependencies: ["FuzzedNotifyWire"], swiftSettings: wireAlias),
        .executableTarget(name: "FuzzClientFrames", dependencies: fuzzDependencies, swiftSettings: wireAlias),
        .executableTarget(name: "FuzzServerFrames", dependencies: fuzzDependencies, swiftSettings: wireAlias),
        .executableTarget(name: "FuzzAccumulatorChunking", dependencies: fuzzDependencies, swiftSettings: wireAlias),
        .executableTarget(name: "FuzzNamesAndPatterns", dependencies: fuzzDependencies, swiftSettings: wireAlias),
        .executableTarget(
            name: "FuzzSnapshot", dependencies: fuzzDependencies + ["SnapshotUnderTest"], swiftSettings: wireAlias),
        .executableTarget(
            name: "FuzzConfiguration",
            dependencies: fuzzDependencies + ["ConfigurationUnderTest"],
            swiftSettings: wireAlias
        ),
        .executableTarget(
            name: "FuzzTypedMessage",
            dependencies: ["FuzzSupport", .product(name: "Notify", package: "notifyd")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
