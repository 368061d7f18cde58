import Foundation
import NIOCore

/// Why a key-value call failed (besides ``NATSClientError`` from the connection and ``NATSJetStreamAPIError``
/// from the server).
package enum NATSKeyValueError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A key outside `[-/_=.a-zA-Z0-9]+`, or starting or ending with `.` (the official clients' rule).
    case invalidKey(String)
    /// A bucket name outside `[-_a-zA-Z0-9]+`.
    case invalidBucketName(String)
    /// The bucket does not exist (and was not to be created).
    case bucketNotFound(String)
    /// The stream behind the bucket is not a key-value stream (its `max_msgs_per_subject` is below 1).
    case badBucket(String)
    /// The server answered with something this client cannot read.
    case unexpectedResponse(String)

    /// One line for logs and error messages.
    package var description: String {
        switch self {
        case .invalidKey(let key): "invalid key-value key '\(key)'"
        case .invalidBucketName(let name): "invalid key-value bucket name '\(name)'"
        case .bucketNotFound(let name): "key-value bucket '\(name)' not found"
        case .badBucket(let name): "stream KV_\(name) is not a key-value bucket"
        case .unexpectedResponse(let what): "unexpected JetStream response: \(what)"
        }
    }
}

/// One value of a key-value bucket, as a get or a watch found it.
package struct NATSKeyValueEntry: Equatable, Sendable {
    /// What the entry records.
    package enum Operation: String, Equatable, Sendable {
        /// A value was put.
        case put = "PUT"
        /// The key was deleted (`KV-Operation: DEL`).
        case delete = "DEL"
        /// The key was purged (`KV-Operation: PURGE`).
        case purge = "PURGE"
    }

    /// The bucket's name.
    package var bucket: String
    /// The key.
    package var key: String
    /// The value, byte for byte (empty for deletions).
    package var value: ByteBuffer
    /// The message's headers: those the putter set, and `KV-Operation` for deletions; nil when none.
    package var headers: NATSHeaders?
    /// The stream sequence of the entry: grows with every change to any key of the bucket.
    package var revision: UInt64
    /// What the entry records.
    package var operation: Operation
    /// When the server stored it, if it said.
    package var created: Date?

    /// Creates an entry (for tests and for callers that forward entries).
    package init(
        bucket: String, key: String, value: ByteBuffer, headers: NATSHeaders? = nil, revision: UInt64,
        operation: Operation = .put, created: Date? = nil
    ) {
        self.bucket = bucket
        self.key = key
        self.value = value
        self.headers = headers
        self.revision = revision
        self.operation = operation
        self.created = created
    }

    /// The operation a stored message's headers record.
    static func operation(of headers: NATSHeaders?) -> Operation {
        switch headers?[NATSKeyValue.operationHeader] {
        case "DEL": return .delete
        case "PURGE": return .purge
        default: break
        }
        // nats-server 2.11 marks keys it removed itself with this header instead.
        switch headers?["Nats-Marker-Reason"] {
        case "MaxAge", "Purge": return .purge
        case "Remove": return .delete
        default: return .put
        }
    }
}

/// A JetStream key-value bucket, laid out as the official NATS clients lay it out (ADR-8), so they can share it:
/// the stream `KV_<bucket>` holds the subjects `$KV.<bucket>.>`, one message per key (history 1), deletions are
/// messages with a `KV-Operation: DEL` header.
///
/// Get one with ``NATSClient/keyValue(bucket:createIfMissing:storage:timeout:)``.
package struct NATSKeyValue: Sendable {
    /// Where a bucket keeps its values.
    package enum Storage: String, Sendable {
        /// On disk: values survive a server restart.
        case file
        /// In memory.
        case memory
    }

    /// The header that marks deletions and purges.
    package static let operationHeader = "KV-Operation"

    /// The bucket's name.
    package let bucket: String
    /// The stream behind it: `KV_<bucket>`.
    package let streamName: String
    let jetStream: NATSJetStream
    /// `$KV.<bucket>.`: the key follows.
    let subjectPrefix: String
    /// Whether the stream answers direct gets (`allow_direct`).
    let direct: Bool
    /// When the bucket's stream was created (the server's timestamp, as sent), as found when the bucket was opened;
    /// `nil` if the server did not say. A bucket deleted and created again is another stream under the same name,
    /// whose revisions start over: a user of the bucket compares this to tell.
    package let streamCreated: String?

    init(bucket: String, jetStream: NATSJetStream, direct: Bool, streamCreated: String?) {
        self.bucket = bucket
        streamName = "KV_" + bucket
        self.jetStream = jetStream
        self.streamCreated = streamCreated
        subjectPrefix = "$KV.\(bucket)."
        self.direct = direct
    }

    /// Whether `key` is a valid key: `[-/_=.a-zA-Z0-9]+`, not starting or ending with `.`.
    package static func isValidKey(_ key: String) -> Bool {
        guard let first = key.utf8.first, let last = key.utf8.last else { return false }
        if first == UInt8(ascii: ".") || last == UInt8(ascii: ".") { return false }
        return key.utf8.allSatisfy(isKeyByte)
    }

    /// Whether `keys` is a valid watch pattern: a valid key, or one with `*` tokens and a final `>` token.
    package static func isValidKeyPattern(_ keys: String) -> Bool {
        guard NATSSubject.isValidSubscribeSubject(keys) else { return false }
        return keys.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).allSatisfy { token in
            token.elementsEqual("*".utf8) || token.elementsEqual(">".utf8) || token.allSatisfy(isKeyByte)
        }
    }

    /// Whether `name` is a valid bucket name: `[-_a-zA-Z0-9]+`.
    package static func isValidBucketName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    private static func isKeyByte(_ byte: UInt8) -> Bool {
        isAlphanumeric(byte) || "-/_=.".utf8.contains(byte)
    }

    /// Binds to the bucket, creating its stream first if asked and missing.
    static func open(
        bucket: String, client: NATSClient, createIfMissing: Bool, storage: Storage, timeout: TimeAmount
    ) async throws -> NATSKeyValue {
        guard isValidBucketName(bucket) else { throw NATSKeyValueError.invalidBucketName(bucket) }
        let jetStream = NATSJetStream(client: client, timeout: timeout)
        let stream = "KV_" + bucket
        var info: NATSJetStream.StreamInfo
        do {
            info = try await jetStream.streamInfo(stream)
        } catch let error as NATSJetStreamAPIError where error.errorCode == NATSJetStreamAPIError.streamNotFound {
            guard createIfMissing else { throw NATSKeyValueError.bucketNotFound(bucket) }
            var config = NATSJetStream.StreamConfig(name: stream, subjects: ["$KV.\(bucket).>"])
            config.storage = storage.rawValue
            do {
                info = try await jetStream.createStream(config)
            } catch let error as NATSJetStreamAPIError where error.errorCode == NATSJetStreamAPIError.streamNameInUse {
                // Another client created it meanwhile, with its own settings: bind to that.
                info = try await jetStream.streamInfo(stream)
            }
        }
        guard (info.config.maxMsgsPerSubject ?? 0) >= 1 else { throw NATSKeyValueError.badBucket(bucket) }
        return NATSKeyValue(
            bucket: bucket, jetStream: jetStream, direct: info.config.allowDirect ?? false, streamCreated: info.created)
    }

    /// Whether the bucket's stream is still the one it was opened on: `false` once it was deleted, or deleted and
    /// created again (``streamCreated`` differs). A watch tells the same by ending; this is for users that do not
    /// watch.
    ///
    /// - Throws: ``NATSClientError`` or ``NATSJetStreamAPIError`` when the server cannot say (not that it is gone).
    package func isStreamOpened() async throws -> Bool {
        do {
            let created = try await jetStream.streamInfo(streamName).created
            return streamCreated == nil || created == nil || created == streamCreated
        } catch let error as NATSJetStreamAPIError where error.errorCode == NATSJetStreamAPIError.streamNotFound {
            return false
        }
    }

    /// Puts `value` under `key`, with `headers` if any (they come back with the value from ``get(_:)`` and
    /// watches).
    ///
    /// - Returns: the entry's revision (its stream sequence).
    /// - Throws: ``NATSKeyValueError/invalidKey(_:)``; ``NATSClientError`` (``NATSClientError/noResponders(_:)``
    ///   when the bucket's stream is gone); ``NATSJetStreamAPIError`` when the server refuses it.
    @discardableResult
    package func put(_ key: String, value: ByteBuffer, headers: NATSHeaders? = nil) async throws -> UInt64 {
        guard Self.isValidKey(key) else { throw NATSKeyValueError.invalidKey(key) }
        return try await jetStream.publish(subjectPrefix + key, payload: value, headers: headers).seq
    }

    /// Puts `value` under `key`, as the `ByteBuffer` variant.
    @discardableResult
    package func put(_ key: String, value: [UInt8], headers: NATSHeaders? = nil) async throws -> UInt64 {
        try await put(key, value: ByteBuffer(bytes: value), headers: headers)
    }

    /// The current entry of `key`, or nil when it has none or was deleted or purged.
    ///
    /// - Throws: ``NATSKeyValueError/invalidKey(_:)``, ``NATSClientError``, ``NATSJetStreamAPIError``.
    package func get(_ key: String) async throws -> NATSKeyValueEntry? {
        guard Self.isValidKey(key) else { throw NATSKeyValueError.invalidKey(key) }
        let subject = subjectPrefix + key
        guard let message = try await jetStream.lastMessage(stream: streamName, subject: subject, direct: direct),
            message.subject == subject
        else { return nil }
        let operation = NATSKeyValueEntry.operation(of: message.headers)
        guard operation == .put else { return nil }
        return NATSKeyValueEntry(
            bucket: bucket, key: key, value: message.data, headers: message.headers, revision: message.sequence,
            operation: operation, created: message.time)
    }

    /// Deletes `key`: puts an empty value with `KV-Operation: DEL` (watchers see it; ``get(_:)`` returns nil).
    ///
    /// - Returns: the deletion's revision.
    /// - Throws: as `put(_:value:headers:)`.
    @discardableResult
    package func delete(_ key: String) async throws -> UInt64 {
        guard Self.isValidKey(key) else { throw NATSKeyValueError.invalidKey(key) }
        let headers = NATSHeaders([(Self.operationHeader, "DEL")])
        return try await jetStream.publish(subjectPrefix + key, payload: ByteBuffer(), headers: headers).seq
    }
}

extension NATSClient {
    /// Binds to the JetStream key-value bucket `bucket`, creating it (history 1, as the official clients create
    /// buckets) when it is missing and `createIfMissing`.
    ///
    /// The stream is `KV_<bucket>` on `$KV.<bucket>.>` with one message per subject, rollup headers allowed,
    /// deletes denied, discard new and direct gets allowed (servers before 2.9 ignore that setting, and gets then
    /// go through `STREAM.MSG.GET`). An existing bucket is bound with the settings it has.
    ///
    /// - Parameter timeout: how long each JetStream call of this bucket may take.
    /// - Throws: ``NATSKeyValueError/invalidBucketName(_:)``, ``NATSKeyValueError/bucketNotFound(_:)``,
    ///   ``NATSKeyValueError/badBucket(_:)``; ``NATSClientError/noResponders(_:)`` when the server has no
    ///   JetStream; ``NATSJetStreamAPIError``.
    package func keyValue(
        bucket: String, createIfMissing: Bool = true, storage: NATSKeyValue.Storage = .file,
        timeout: TimeAmount = .seconds(5)
    ) async throws -> NATSKeyValue {
        try await NATSKeyValue.open(
            bucket: bucket, client: self, createIfMissing: createIfMissing, storage: storage, timeout: timeout)
    }
}
