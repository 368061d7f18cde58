#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import NIOCore
import NIOPosix
import NotifyWire

/// Serves a scrape: on a Unix socket the exposition is written as soon as a client connects, then the
/// connection closes (as dbus-broker's metrics socket does); over HTTP the request is read first and the
/// exposition is the body of a `200`. The scraper's uid (`SO_PEERCRED`) decides which per-user and per-connection
/// series it sees; an HTTP scraper's is unknown and sees none.
final class MetricsScrapeHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let broker: Broker
    private let isHTTP: Bool
    private var request: [UInt8] = []

    init(broker: Broker, isHTTP: Bool) {
        self.broker = broker
        self.isHTTP = isHTTP
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        guard !isHTTP else { return }
        let scraper = PeerCredentials.read(from: context.channel)?.uid
        respond(context: context, body: broker.metrics.scrape(broker, scraper: scraper))
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard isHTTP else { return }
        request += unwrapInboundIn(data).readableBytesView
        // The request line and headers are all a scrape sends; a request that never ends them is cut off.
        if request.count > 8_192 {
            context.close(promise: nil)
            return
        }
        guard request.count >= 4, request.suffix(4) == Array("\r\n\r\n".utf8) else { return }
        let body = broker.metrics.scrape(broker, scraper: nil)
        let head = "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: \(body.count)\r\n\r\n"
        respond(context: context, body: Array(head.utf8) + body)
    }

    private func respond(context: ChannelHandlerContext, body: [UInt8]) {
        var buffer = context.channel.allocator.buffer(capacity: body.count)
        buffer.writeBytes(body)
        context.writeAndFlush(wrapOutboundOut(buffer)).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }
}

extension NotifyServer {
    /// Starts the metrics listeners the configuration asks for; returns their channels (closed at stop).
    func startMetricsEndpoints(broker: NIOLoopBound<Broker>) async throws -> [Channel] {
        var channels: [Channel] = []
        func bootstrap(isHTTP: Bool) -> ServerBootstrap {
            ServerBootstrap(group: group)
                .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .serverChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(ListenerBackoff()) }
                }
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            MetricsScrapeHandler(broker: broker.value, isHTTP: isHTTP))
                    }
                }
        }
        switch configuration.metricsAddress {
        case .path(let path):
            _ = unlink(path)
            let channel = try await bootstrap(isHTTP: false).bind(unixDomainSocketPath: path).get()
            _ = chmod(path, mode_t(configuration.socketMode))
            channels.append(channel)
        case .inheritedDescriptor(let descriptor, _):
            channels.append(try await bootstrap(isHTTP: false).withBoundSocket(descriptor).get())
        case nil:
            break
        }
        if let http = configuration.metricsHTTP {
            channels.append(try await bootstrap(isHTTP: true).bind(host: http.host, port: http.port).get())
        }
        return channels
    }
}
