// swift-tools-version:6.0
import PackageDescription

// The daemon's hot path touches class properties and NIO's inlined ByteBuffer code several times per delivery;
// in release builds the run-time exclusivity checks on those accesses are a large share of its CPU
// (Benchmarks/BENCHMARKS.md, F1, F18). NotifyWire takes the flag too, since the daemon runs its frame accumulator
// and run encoder once per post (it is value code over ByteBuffer: no state of its own to check). Debug builds and
// every test keep the checks, so a violation still fails `make test`; the client library's own module never
// takes this flag.
let daemonHotPathSettings: [SwiftSetting] = [
    .unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))
]

let package = Package(
    name: "notifyd",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "Notify", targets: ["Notify"]),
        .executable(name: "notifyd", targets: ["notifyd"]),
        .executable(name: "notifyctl", targets: ["notifyctl"]),
        .executable(name: "notifyd-bridge", targets: ["notifyd-bridge"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-atomics.git", from: "1.3.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        // The wire protocol: frames, names, limits, error codes. No I/O.
        // The vocabulary the daemon and clients share, public: `Notify` re-exports it.
        .target(name: "NotifyTypes", swiftSettings: daemonHotPathSettings),
        .target(
            name: "NotifyWire",
            dependencies: ["NotifyTypes", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: daemonHotPathSettings
        ),
        // The daemon's core: registry, routing, delivery, NIO handlers.
        // Linux calls Swift cannot make itself (memfd seals, SO_COOKIE, SCM_RIGHTS), for the hand-over.
        .target(name: "CNotifyPosix"),
        .target(
            name: "NotifyServer",
            dependencies: [
                "CNotifyPosix",
                .product(name: "Prometheus", package: "swift-prometheus"),
                "NotifyWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
            ],
            swiftSettings: daemonHotPathSettings
        ),
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .target(
            name: "NotifySystemd",
            dependencies: [
                "CSystemd", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "notifyd",
            dependencies: [
                "NotifyServer", "NotifySystemd", "NotifyWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: daemonHotPathSettings
        ),
        // The client library users import.
        .target(
            name: "Notify",
            dependencies: [
                "NotifyWire",
                .product(name: "Atomics", package: "swift-atomics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "notifyctl",
            dependencies: [
                "Notify",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // A NATS core client on SwiftNIO (no Swift NATS client builds on Linux), for the bridge.
        .target(
            name: "NotifyNATS",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The bridge between the local daemon and NATS (`notifyd-bridge`), as a library so tests can drive it.
        .target(
            name: "NotifyBridge",
            dependencies: [
                "Notify", "NotifyNATS", "NotifyWire",
                .product(name: "Atomics", package: "swift-atomics"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "notifyd-bridge",
            dependencies: [
                "NotifyBridge",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        // A small client-library program used by the integration tests (a real separate process).
        .executableTarget(
            name: "notify-test-peer",
            dependencies: [
                "Notify",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tests/TestPeer"
        ),
        .executableTarget(
            name: "hello-observer",
            dependencies: ["Notify"],
            path: "Examples/HelloObserver"
        ),
        // Allocation counts of the wire protocol's hot paths (Benchmarks/BENCHMARKS.md, "Allocations"), run by
        // Benchmarks/run.py. The benchmarks are a package of their own (Benchmarks/Package.swift, so users of `Notify`
        // never resolve their dependencies); this one stays here because it measures NotifyWire, which only this
        // package can import. Not a product: nothing that depends on this package builds it.
        .executableTarget(
            name: "notify-alloc-bench",
            dependencies: ["NotifyWire", .product(name: "NIOCore", package: "swift-nio")],
            path: "Benchmarks/notify-alloc-bench"
        ),
        // What the test targets share (modelled on hummingbird's HummingbirdTesting): the one raw protocol client,
        // in-process server, credential switcher and timeout helper. A regular target, so its API is `package`.
        // How the tests start child processes (posix_spawn with GNU file actions; see SpawnedProcess.swift).
        .target(
            name: "CNotifyTestSpawn",
            path: "Tests/CNotifyTestSpawn"
        ),
        .target(
            name: "NotifyTestSupport",
            dependencies: [
                "NotifyServer", "NotifyWire", "CNotifyTestSpawn",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/NotifyTestSupport"
        ),
        .testTarget(
            name: "NotifyWireTests",
            dependencies: ["NotifyWire", "NotifyTestSupport", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .testTarget(
            name: "NotifyServerTests",
            dependencies: [
                "NotifyServer", "NotifyWire", "NotifyTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // Read by path (HandoverSnapshotTests): a snapshot of the previous format, kept as it was written.
            exclude: ["Fixtures"]
        ),
        .testTarget(
            name: "NotifyTests",
            dependencies: [
                "Notify", "NotifyWire", "NotifyServer", "NotifyTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "NotifyNATSTests",
            dependencies: [
                "NotifyNATS", "NotifyTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "NotifyBridgeTests",
            dependencies: [
                "NotifyBridge", "NotifyNATS", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "OrderedCollections", package: "swift-collections"),
            ]
        ),
        .testTarget(
            name: "NotifySystemdTests",
            dependencies: ["NotifySystemd", "NotifyTestSupport", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "Notify", "NotifyWire", "NotifyNATS", "NotifyBridge", "NotifyTestSupport", "notifyd", "notifyctl",
                "notify-test-peer", "notifyd-bridge",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            // The reference NATS client (nats-py) as a peer of the interoperability test.
            exclude: ["NATS/nats_py_peer.py"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
