import NIOCore

/// What the bucket is known to hold per key, with the revision that says so (an acknowledged put, an entry the
/// watch delivered), so that putting the value it already holds can be skipped.
///
/// Only a newer revision replaces a key's value: the watch may deliver another host's older entry after this
/// host's put was acknowledged, and taking it would make the bucket seem to hold a value it no longer holds (and
/// skip the put that would restore the host's value there).
package struct BucketValueCache: Sendable {
    private var values: [String: (revision: UInt64, bytes: ByteBuffer)] = [:]

    package init() {}

    /// The bucket holds `bytes` under `key` at `revision`; ignored when a newer revision is known.
    package mutating func record(_ key: String, revision: UInt64, bytes: ByteBuffer) {
        if let known = values[key], known.revision >= revision { return }
        values[key] = (revision, bytes)
    }

    /// Whether the bucket is known to hold `bytes` under `key` now.
    package func holds(_ key: String, bytes: ByteBuffer) -> Bool {
        values[key]?.bytes == bytes
    }

    /// Forgets everything: the next watch delivers the bucket's current entries again (a recreated bucket counts
    /// its revisions from 1).
    package mutating func removeAll() {
        values.removeAll()
    }
}
