import NIOCore
import NotifyNATS
import NotifyTestSupport

extension NATSClient {
    /// Deletes the stream behind the key-value bucket `bucket` (`STREAM.DELETE`), as `nats kv del` does; fails unless
    /// the server says it succeeded.
    func deleteBucketStream(_ bucket: String) async throws {
        let reply = String(buffer: try await request("$JS.API.STREAM.DELETE.KV_\(bucket)").payload)
        guard reply.contains("\"success\":true") else {
            throw TestFailure("deleting the stream of the bucket \(bucket) failed: \(reply)")
        }
    }
}
