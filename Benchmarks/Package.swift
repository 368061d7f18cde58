// swift-tools-version:6.0
import PackageDescription

// The benchmark clients of `make bench` (Benchmarks/BENCHMARKS.md), a package of their own as in swift-nio, so that
// users of the `Notify` library never resolve what only the benchmarks need (hdrhistogram-swift). Built by
// Benchmarks/run.py (`make bench`, `make bench-smoke`) in a scratch path of its own inside the root's
// (.build/benchmarks, .build-bench/benchmarks); the daemon it measures is the root package's `notifyd`, built there.
//
// notify-bench uses the library as users get it: the `Notify` product and its public API. The allocation counts of
// the wire protocol (`notify-alloc-bench`) measure NotifyWire, which has `package` access (only the root package's
// targets can import it), so that executable is a target of the root package (Benchmarks/notify-alloc-bench, declared
// in ../Package.swift), not of this one.
let package = Package(
    name: "notifyd-benchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "notifyd", path: ".."),
        // Latency percentiles.
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
    ],
    targets: [
        // The shared-memory board of C/bench.h, a monotonic clock and libmalloccount.so's counters, for Swift.
        .target(name: "CBenchSupport", path: "SwiftClient/CBenchSupport"),
        // The Swift client of `make bench`: the same roles and board protocol as the C driver (C/nbench.c).
        .executableTarget(
            name: "notify-bench",
            dependencies: [
                "CBenchSupport",
                .product(name: "Notify", package: "notifyd"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            path: "SwiftClient/notify-bench"
        ),
    ],
    swiftLanguageModes: [.v6]
)
