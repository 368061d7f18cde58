import NIOCore
import NotifyWire

/// Posts made while disconnected under `DisconnectedPosting.wait`, oldest first, until a connection sends them
/// or their deadline passes.
struct HeldPosts: Sendable {
    /// The most posts held at once; beyond it a post fails as when not waiting.
    static let limit = 10_000

    /// A post as it was made.
    struct Post: Sendable {
        var deadline: NIODeadline
        var name: String
        var payload: ByteBuffer
        var retain: Bool
        var origin: RelayOrigin?
    }

    private var posts: [Post] = []
    /// Whether a task to expire the oldest post is scheduled.
    private var expiryScheduled = false

    enum HoldAction {
        /// Held; schedule ``expire(now:)`` at this deadline (the first hold since none was scheduled).
        case scheduleExpiry(NIODeadline)
        /// Held; an expiry task is already scheduled.
        case held
        case full
    }

    mutating func hold(_ post: Post) -> HoldAction {
        guard posts.count < Self.limit else { return .full }
        posts.append(post)
        if expiryScheduled { return .held }
        expiryScheduled = true
        return .scheduleExpiry(posts[0].deadline)
    }

    /// Drops the posts whose deadline passed; returns how many, and when to run again (`nil`: none left).
    mutating func expire(now: NIODeadline) -> (expired: Int, next: NIODeadline?) {
        let count = posts.prefix { $0.deadline <= now }.count
        posts.removeFirst(count)
        expiryScheduled = !posts.isEmpty
        return (count, posts.first?.deadline)
    }

    /// Takes every held post, oldest first, to be sent on a new connection. A scheduled expiry task stays
    /// scheduled and finds nothing (or the posts held after this).
    mutating func takeAll() -> [Post] {
        defer { posts.removeAll() }
        return posts
    }
}
