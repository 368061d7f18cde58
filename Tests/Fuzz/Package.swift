// swift-tools-version:6.0
import PackageDescription

// libFuzzer targets for notifyd (issue 15). Not part of the root package, so a plain `swift build` there is
// unaffected; `make fuzz-smoke` / `make fuzz` build this with `-sanitize=fuzzer` (see README, "Fuzzing").
//
// Every target is an executable whose `@main` calls `LLVMFuzzerRunDriver` (swiftlang/swift-package-manager#8731):
// SwiftPM links an executable's own entry point, so libFuzzer's `main` cannot be used.
//
// The root package exports only the `Notify` library product; NotifyWire comes with it. NotifyServer is not
// exported, so `ConfigurationUnderTest` compiles its `AccessConfiguration.swift` through a symbolic link
// (the same file, never a copy).
let fuzzDependencies: [Target.Dependency] = [
    "FuzzSupport",
    .product(name: "Notify", package: "notifyd"),
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
        .target(
            name: "ConfigurationUnderTest",
            dependencies: [.product(name: "Notify", package: "notifyd")]
        ),
        .executableTarget(name: "FuzzClientFrames", dependencies: fuzzDependencies),
        .executableTarget(name: "FuzzServerFrames", dependencies: fuzzDependencies),
        .executableTarget(name: "FuzzAccumulatorChunking", dependencies: fuzzDependencies),
        .executableTarget(name: "FuzzNamesAndPatterns", dependencies: fuzzDependencies),
        .executableTarget(name: "FuzzConfiguration", dependencies: fuzzDependencies + ["ConfigurationUnderTest"]),
        .executableTarget(name: "FuzzTypedMessage", dependencies: fuzzDependencies),
    ],
    swiftLanguageModes: [.v6]
)
