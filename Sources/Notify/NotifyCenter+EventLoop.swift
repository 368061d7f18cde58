import NIOCore

extension NotifyCenter {
    /// The center's I/O thread, for a package client that does its own I/O on the same thread: the bridge runs its
    /// NATS connection there, so a notification crosses the bridge without waking another thread.
    package var eventLoop: any EventLoop { core.eventLoop }
}
