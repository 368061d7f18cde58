import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import NotifyServer

/// Reaches `NotifyServer`'s private event loop group by reflection (`@testable` does not open `private`).
func eventLoopGroup(of server: NotifyServer) throws -> MultiThreadedEventLoopGroup {
    try #require(
        Mirror(reflecting: server).children.first { $0.label == "group" }?.value as? MultiThreadedEventLoopGroup,
        "NotifyServer keeps its event loop group in a property named 'group'")
}


/// The thread name prefix of a server's event loop group, e.g. `NIO-ELT-12-#`.
func eventLoopThreadPrefix(of server: NotifyServer) throws -> String {
    // "MultiThreadedEventLoopGroup { threadPattern = NIO-ELT-12-#* }"
    let description = String(describing: try eventLoopGroup(of: server))
    let start = try #require(description.range(of: "threadPattern = ")).upperBound
    let end = try #require(description[start...].firstIndex(of: "*"))
    return String(description[start..<end])
}

/// Runs `body` on the server's event loop with its router, reached by reflection like ``eventLoopGroup(of:)``.
func withRouter<T: Sendable>(
    of server: NotifyServer, _ body: @escaping @Sendable (SubscriptionRouter) -> T
) async throws -> T {
    let box = try #require(
        Mirror(reflecting: server).children.first { $0.label == "router" }?.value
            as? NIOLockedValueBox<NIOLoopBound<SubscriptionRouter>?>,
        "NotifyServer keeps its router in a property named 'router'")
    let bound = try #require(box.withLockedValue { $0 }, "the server is running")
    return try await bound.eventLoop.submit { body(bound.value) }.get()
}
