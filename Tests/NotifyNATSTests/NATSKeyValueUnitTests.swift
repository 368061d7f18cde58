import Foundation
import NIOCore
import Testing

@testable import NotifyNATS

@Suite("NATS key-value: keys, JetStream answers, reply subjects")
struct NATSKeyValueUnitTests {
    @Test("keys as the official clients allow them: [-/_=.a-zA-Z0-9]+, no leading or trailing dot")
    func keys() {
        for key in ["a", "A-z_0=9", "state/x.y", "a..b", "-", "=", "_", "a.b.c"] {
            #expect(NATSKeyValue.isValidKey(key), "\(key)")
        }
        for key in ["", ".", ".a", "a.", "a b", "a*", "*", ">", "a.>", "ä", "a\tb", "a:b", "a\r\n", "a@b"] {
            #expect(!NATSKeyValue.isValidKey(key), "\(key)")
        }
        for pattern in [">", "a.>", "*.b", "a", "a.*.c", "state/x.*"] {
            #expect(NATSKeyValue.isValidKeyPattern(pattern), "\(pattern)")
        }
        for pattern in ["", ">.a", "a.>.b", "a..b", ".a", "a b", "a*", "ä.>"] {
            #expect(!NATSKeyValue.isValidKeyPattern(pattern), "\(pattern)")
        }
        for name in ["cfg", "A-b_9"] { #expect(NATSKeyValue.isValidBucketName(name), "\(name)") }
        for name in ["", "a.b", "a b", "a*", "a/b", "a=b"] { #expect(!NATSKeyValue.isValidBucketName(name), "\(name)") }
    }

    @Test("a JetStream API error becomes a typed error with its description; an answer without one decodes")
    func apiErrors() throws {
        let body = ByteBuffer(
            string: #"{"type":"io.nats.jetstream.api.v1.stream_info_response","error":{"code":404,"err_code":10059,"description":"stream not found"}}"#)
        #expect(throws: NATSJetStreamAPIError(code: 404, errorCode: 10059, description: "stream not found")) {
            _ = try NATSJetStream.decode(NATSJetStream.StreamInfo.self, from: body)
        }
        #expect("\(NATSJetStreamAPIError(code: 503, errorCode: 10039, description: "jetstream not enabled"))" == "jetstream not enabled")
        let ack = try NATSJetStream.decode(NATSJetStream.PubAck.self, from: ByteBuffer(string: #"{"stream":"KV_b","seq":42}"#))
        #expect(ack.seq == 42 && ack.stream == "KV_b")
        let pubAckError = ByteBuffer(string: #"{"error":{"code":503,"description":"no space"}}"#)
        #expect(throws: NATSJetStreamAPIError(code: 503, errorCode: 0, description: "no space")) {
            _ = try NATSJetStream.decode(NATSJetStream.PubAck.self, from: pubAckError)
        }
        #expect(throws: NATSKeyValueError.self) {
            _ = try NATSJetStream.decode(NATSJetStream.PubAck.self, from: ByteBuffer(string: "not json"))
        }
        let info = try NATSJetStream.decode(
            NATSJetStream.ConsumerInfo.self,
            from: ByteBuffer(string: #"{"stream_name":"KV_b","name":"x1","num_pending":3,"config":{}}"#))
        #expect(info.name == "x1" && info.numPending == 3)
    }

    @Test("the stream and consumer configurations are encoded in the server's snake_case")
    func encoding() throws {
        let stream = String(buffer: try NATSJetStream.encode(NATSJetStream.StreamConfig(name: "KV_b", subjects: ["$KV.b.>"])))
        for field in [
            #""allow_rollup_hdrs":true"#, #""deny_delete":true"#, #""allow_direct":true"#, #""discard":"new""#,
            #""max_msgs_per_subject":1"#, #""subjects":["$KV.b.>"]"#, #""duplicate_window":120000000000"#,
        ] {
            #expect(stream.contains(field), "\(field) in \(stream)")
        }
        var consumer = NATSJetStream.ConsumerConfig(
            deliverSubject: "_INBOX.x", deliverPolicy: "by_start_sequence", filterSubject: "$KV.b.>", flowControl: true,
            idleHeartbeat: 5_000_000_000, inactiveThreshold: nil)
        consumer.optStartSeq = 9
        let text = String(buffer: try NATSJetStream.encode(consumer))
        for field in [
            #""deliver_subject":"_INBOX.x""#, #""opt_start_seq":9"#, #""ack_policy":"none""#, #""flow_control":true"#,
            #""idle_heartbeat":5000000000"#, #""mem_storage":true"#, #""filter_subject":"$KV.b.>""#,
        ] {
            #expect(text.contains(field), "\(field) in \(text)")
        }
        #expect(!text.contains("inactive_threshold"))
    }

    @Test("a direct get reply: the stored message without the server's headers, nil for 404, an error otherwise")
    func directGet() throws {
        var headers = NATSHeaders([
            ("Nats-Stream", "KV_b"), ("Nats-Subject", "$KV.b.k"), ("Nats-Sequence", "7"),
            ("Nats-Time-Stamp", "2024-05-01T10:00:00.5Z"), ("Origin", "h1"),
        ])
        let found = try #require(
            try NATSJetStream.storedMessage(
                fromDirectReply: NATSMessage(subject: "_INBOX.a.b", sid: 1, headers: headers, payload: ByteBuffer(string: "v"))))
        #expect(found.subject == "$KV.b.k" && found.sequence == 7 && found.headers == NATSHeaders([("Origin", "h1")]))
        #expect(found.time?.timeIntervalSince1970 == 1_714_557_600.5)
        headers = NATSHeaders()
        headers.status = 404
        #expect(try NATSJetStream.storedMessage(fromDirectReply: NATSMessage(subject: "i", sid: 1, headers: headers, payload: ByteBuffer())) == nil)
        headers.status = 408
        #expect(throws: NATSJetStreamAPIError.self) {
            _ = try NATSJetStream.storedMessage(fromDirectReply: NATSMessage(subject: "i", sid: 1, headers: headers, payload: ByteBuffer()))
        }
        #expect(NATSJetStream.parseTime("2024-05-01T10:00:00.123456789Z")?.timeIntervalSince1970 ?? 0 > 1_714_557_600.12)
        #expect(NATSJetStream.parseTime("2024-05-01T10:00:00Z")?.timeIntervalSince1970 == 1_714_557_600)
    }

    @Test("a push consumer's reply subject: both the short and the long (domain, account) forms")
    func metadata() throws {
        let short = try #require(NATSJetStreamMetadata(replySubject: "$JS.ACK.KV_b.c1.1.42.7.1714557600000000000.3"))
        #expect(short.stream == "KV_b" && short.consumer == "c1" && short.delivered == 1)
        #expect(short.streamSequence == 42 && short.consumerSequence == 7 && short.pending == 3)
        #expect(short.timestamp == 1_714_557_600_000_000_000)
        let long = try #require(NATSJetStreamMetadata(replySubject: "$JS.ACK.hub.ACCHASH.KV_b.c1.2.43.8.1714557600000000000.0.xyz"))
        #expect(long.stream == "KV_b" && long.streamSequence == 43 && long.consumerSequence == 8 && long.pending == 0)
        #expect(NATSJetStreamMetadata(replySubject: "_INBOX.abc") == nil)
        #expect(NATSJetStreamMetadata(replySubject: "$JS.ACK.KV_b.c1.x.42.7.1.3") == nil)
    }
}

@Suite("NATS key-value watch sequencing")
struct NATSKeyValueWatchSequencerTests {
    typealias Sequencer = NATSKeyValueWatchSequencer

    @Test("initial values, the marker when nothing is pending, then changes in order")
    func initialThenChanges() {
        var sequencer = Sequencer()
        let (generation, start) = sequencer.beginConsumer()
        #expect(start == .lastPerSubject)
        #expect(sequencer.message(generation: generation, consumerSequence: 1, streamSequence: 3, pending: 1) == .accept(deliver: true, initialValuesDone: false))
        let created1 = sequencer.consumerCreated(generation: generation, pending: 2)
        #expect(!created1, "messages came first: they bring the marker")
        #expect(sequencer.message(generation: generation, consumerSequence: 2, streamSequence: 5, pending: 0) == .accept(deliver: true, initialValuesDone: true))
        #expect(sequencer.message(generation: generation, consumerSequence: 3, streamSequence: 6, pending: 0) == .accept(deliver: true, initialValuesDone: false))
        #expect(sequencer.lastStreamSequence == 6)
    }

    @Test("an empty bucket: the consumer's creation brings the marker, once")
    func emptyBucket() {
        var sequencer = Sequencer()
        let (generation, _) = sequencer.beginConsumer()
        let created2 = sequencer.consumerCreated(generation: generation, pending: 0)
        #expect(created2)
        #expect(sequencer.message(generation: generation, consumerSequence: 1, streamSequence: 1, pending: 0) == .accept(deliver: true, initialValuesDone: false))
        let created3 = sequencer.consumerCreated(generation: generation, pending: 0)
        #expect(!created3)
    }

    @Test("a consumer-sequence gap resets; the new consumer starts after the last delivered stream sequence; the old one is ignored")
    func gapResets() {
        var sequencer = Sequencer()
        let (first, _) = sequencer.beginConsumer()
        _ = sequencer.consumerCreated(generation: first, pending: 0)
        #expect(sequencer.message(generation: first, consumerSequence: 1, streamSequence: 10, pending: 0) == .accept(deliver: true, initialValuesDone: false))
        #expect(sequencer.message(generation: first, consumerSequence: 3, streamSequence: 12, pending: 0) == .reset)
        let (second, start) = sequencer.beginConsumer()
        #expect(start == .sequence(11))
        #expect(sequencer.message(generation: first, consumerSequence: 4, streamSequence: 13, pending: 0) == .ignore)
        #expect(sequencer.message(generation: second, consumerSequence: 1, streamSequence: 11, pending: 1) == .accept(deliver: true, initialValuesDone: false))
        let created4 = sequencer.consumerCreated(generation: second, pending: 0)
        #expect(!created4, "the marker came with the first consumer")
        #expect(sequencer.message(generation: second, consumerSequence: 2, streamSequence: 12, pending: 0) == .accept(deliver: true, initialValuesDone: false))
    }

    @Test("a stream sequence already delivered is not delivered again, but still counts for the marker")
    func duplicates() {
        var sequencer = Sequencer()
        let (first, _) = sequencer.beginConsumer()
        #expect(sequencer.message(generation: first, consumerSequence: 1, streamSequence: 4, pending: 2) == .accept(deliver: true, initialValuesDone: false))
        // Reset before the initial values were all in: last-per-subject again, what was delivered comes again.
        let (second, start) = sequencer.beginConsumer()
        #expect(start == .lastPerSubject)
        #expect(sequencer.message(generation: second, consumerSequence: 1, streamSequence: 4, pending: 1) == .accept(deliver: false, initialValuesDone: false))
        #expect(sequencer.message(generation: second, consumerSequence: 2, streamSequence: 7, pending: 0) == .accept(deliver: true, initialValuesDone: true))
    }

    @Test("a heartbeat naming a consumer sequence not received resets; one naming the last received does not")
    func heartbeats() {
        var sequencer = Sequencer()
        let (generation, _) = sequencer.beginConsumer()
        #expect(sequencer.heartbeat(generation: generation, lastConsumerSequence: 0) != .reset)
        _ = sequencer.message(generation: generation, consumerSequence: 1, streamSequence: 1, pending: 0)
        #expect(sequencer.heartbeat(generation: generation, lastConsumerSequence: 1) != .reset)
        #expect(sequencer.heartbeat(generation: generation, lastConsumerSequence: nil) != .reset)
        #expect(sequencer.heartbeat(generation: generation, lastConsumerSequence: 2) == .reset)
        #expect(sequencer.heartbeat(generation: generation + 1, lastConsumerSequence: 9) == .ignore)
    }
}
