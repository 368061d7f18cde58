import NIOCore

/// What the bucket is known to hold per key, with the revision that says so (an acknowledged put, an entry the
/// watch delivered), so that putting the value it already holds can be skipped.
///
/// Only a newer revision replaces a key's value: the watch may deliver another host's older entry after this
/// host's put was acknowledged, and taking it would make the bucket seem to hold a value it no longer holds (and
/// skip the put that would restore the host's value there). Revisions compare only within one bucket: when the
/// mirror starts over on a bucket that may have been created again (its revisions from 1), ``startOver()``
/// forgets everything, and an acknowledgement of a put made before it is not taken.
package struct BucketValueCache: Sendable {
    private var values: [String: (revision: UInt64, bytes: ByteBuffer?)] = [:]
    /// Counts ``startOver()``s: a put records its acknowledgement only within the generation it started in.
    package private(set) var generation: UInt64 = 0

    /// An empty cache.
    package init() {}

    /// The bucket holds `bytes` under `key` at `revision` (`nil`: the key was deleted or purged), as seen in
    /// `generation`; ignored when a newer revision is known or the generation is over.
    package mutating func record(_ key: String, revision: UInt64, bytes: ByteBuffer?, generation: UInt64) {
        guard generation == self.generation else { return }
        if let known = values[key], known.revision >= revision { return }
        values[key] = (revision, bytes)
    }

    /// Whether the bucket is known to hold `bytes` under `key` now.
    package func holds(_ key: String, bytes: ByteBuffer) -> Bool {
        values[key]?.bytes == bytes
    }

    /// Forgets everything and ends the generation: the next watch delivers the bucket's entries again.
    package mutating func startOver() {
        values.removeAll()
        generation += 1
    }
}
