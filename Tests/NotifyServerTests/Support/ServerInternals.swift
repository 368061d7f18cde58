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
