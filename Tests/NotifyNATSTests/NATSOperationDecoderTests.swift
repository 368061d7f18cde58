import NIOCore
import Testing

@testable import NotifyNATS

@Suite("NATS operation decoder")
struct NATSOperationDecoderTests {
    private func decodeAll(_ text: String) throws -> [NATSServerOperation] {
        var buffer = ByteBuffer(string: text)
        var operations: [NATSServerOperation] = []
        while let operation = try NATSOperationDecoder.decodeOne(&buffer) { operations.append(operation) }
        #expect(buffer.readableBytes == 0, "bytes left over: \(String(buffer: buffer))")
        return operations
    }

    @Test("control operations, case-insensitive, with or without CR")
    func controlOperations() throws {
        let operations = try decodeAll("PING\r\npong\r\n+OK\r\n-ERR 'Authorization Violation'\r\nPING\n")
        #expect(operations == [.ping, .pong, .ok, .error("Authorization Violation"), .ping])
    }

    @Test("INFO keeps the fields the client uses and ignores the rest")
    func info() throws {
        let operations = try decodeAll(
            #"INFO {"server_id":"S1","max_payload":1024,"headers":true,"connect_urls":["10.0.0.2:4222"],"proto":1,"go":"go1.19","extra":{"x":1}}"#
                + "\r\n")
        #expect(
            operations == [
                .info(NATSServerInfo(serverID: "S1", maxPayload: 1024, headers: true, connectURLs: ["10.0.0.2:4222"]))
            ])
    }

    @Test("MSG with and without a reply subject; payload bytes are taken as counted, CRLF inside included")
    func message() throws {
        let operations = try decodeAll("MSG a.b 7 5\r\nhe\r\nl\r\nMSG a.c 8 inbox.1 0\r\n\r\n")
        #expect(
            operations == [
                .message(NATSMessage(subject: "a.b", sid: 7, payload: ByteBuffer(string: "he\r\nl"))),
                .message(NATSMessage(subject: "a.c", sid: 8, replyTo: "inbox.1", payload: ByteBuffer())),
            ])
    }

    @Test("HMSG splits headers from the payload")
    func headerMessage() throws {
        let block = "NATS/1.0\r\nNotifyd-Origin: h1\r\nX: a: b\r\n\r\n"
        let operations = try decodeAll("HMSG x.y 3 \(block.utf8.count) \(block.utf8.count + 2)\r\n\(block)hi\r\n")
        let expected = NATSHeaders([("Notifyd-Origin", "h1"), ("X", "a: b")])
        #expect(
            operations == [.message(NATSMessage(subject: "x.y", sid: 3, headers: expected, payload: ByteBuffer(string: "hi")))]
        )
    }

    @Test("a status line's code is kept (no responders)")
    func statusHeaders() throws {
        let block = "NATS/1.0 503\r\n\r\n"
        let operations = try decodeAll("HMSG _INBOX.a 1 \(block.utf8.count) \(block.utf8.count)\r\n\(block)\r\n")
        guard case .message(let message) = operations.first else {
            Issue.record("no message: \(operations)")
            return
        }
        #expect(message.headers?.status == 503)
    }

    @Test("an operation cut anywhere is returned only once complete, and nothing is consumed before")
    func partialInput() throws {
        let whole = "MSG subject.one 12 10\r\n0123456789\r\nPING\r\n"
        let bytes = Array(whole.utf8)
        for cut in 1..<bytes.count {
            var buffer = ByteBuffer(bytes: bytes[..<cut])
            var got: [NATSServerOperation] = []
            while let operation = try NATSOperationDecoder.decodeOne(&buffer) { got.append(operation) }
            buffer.writeBytes(bytes[cut...])
            while let operation = try NATSOperationDecoder.decodeOne(&buffer) { got.append(operation) }
            #expect(
                got == [.message(NATSMessage(subject: "subject.one", sid: 12, payload: ByteBuffer(string: "0123456789"))), .ping],
                "cut at \(cut)")
        }
    }

    @Test(
        "malformed input is a specific error",
        arguments: [
            ("BOGUS\r\n", NATSProtocolError.unknownOperation("BOGUS")),
            ("MSG a 1\r\n", .malformedOperation("MSG a 1")),
            ("MSG a x 1\r\nz\r\n", .malformedOperation("MSG a x 1")),
            ("MSG a 1 2\r\nabXY", .missingPayloadTerminator("a")),
            ("HMSG a 1 5 2\r\nabcdefg\r\n", .malformedOperation("HMSG a 1 5 2")),
            ("HMSG a 1 2 2\r\nab\r\n", .malformedHeaders("no NATS/1.0 version line")),
            ("INFO {not json\r\n", .malformedInfo("")),
        ])
    func malformed(input: String, expected: NATSProtocolError) {
        var buffer = ByteBuffer(string: input)
        do {
            _ = try NATSOperationDecoder.decodeOne(&buffer)
            Issue.record("no error for \(input.debugDescription)")
        } catch {
            if case .malformedInfo = expected, case .malformedInfo = error { return }
            #expect(error == expected)
        }
    }

    @Test("a control line longer than the limit is refused before its end arrives")
    func longControlLine() {
        var buffer = ByteBuffer(string: "MSG " + String(repeating: "a", count: NATSOperationDecoder.maxControlLine + 1))
        #expect(throws: NATSProtocolError.controlLineTooLong(NATSOperationDecoder.maxControlLine)) {
            _ = try NATSOperationDecoder.decodeOne(&buffer)
        }
    }
}

@Suite("NATS client operations")
struct NATSClientOperationTests {
    @Test("PUB, HPUB, SUB and UNSUB are written as the protocol spells them")
    func encoding() {
        var buffer = ByteBuffer()
        NATSClientOperation.writePublish(subject: "a.b", headers: nil, payload: ByteBuffer(string: "hi"), to: &buffer)
        NATSClientOperation.writePublish(
            subject: "a.b", replyTo: "r", headers: NATSHeaders([("K", "v")]), payload: ByteBuffer(string: "x"), to: &buffer)
        NATSClientOperation.writeSubscribe(subject: "a.>", queueGroup: "q", sid: 4, to: &buffer)
        NATSClientOperation.writeUnsubscribe(sid: 4, to: &buffer)
        #expect(
            String(buffer: buffer)
                == "PUB a.b 2\r\nhi\r\nHPUB a.b r 18 19\r\nNATS/1.0\r\nK: v\r\n\r\nx\r\nSUB a.> q 4\r\nUNSUB 4\r\n")
    }

    @Test("header names and values cannot break the block")
    func headerInjection() throws {
        var headers = NATSHeaders()
        headers.append("Bad: name\r\n", "line\r\nInjected: yes")
        var buffer = ByteBuffer()
        _ = headers.write(to: &buffer)
        let parsed = try NATSHeaders.parse(buffer)
        #expect(parsed.fields.count == 1)
        #expect(parsed["Badname"] == "lineInjected: yes")
    }
}

@Suite("NATS subjects and URLs")
struct NATSSubjectTests {
    @Test("publish and subscribe subjects follow the server's rules")
    func validity() {
        for good in ["a", "a.b.c", "a-b_c:d@e", "日本.東京"] { #expect(NATSSubject.isValidPublishSubject(good), "\(good)") }
        for bad in ["", ".a", "a.", "a..b", "a b", "a\tb", "a.*", "a.>", ">"] {
            #expect(!NATSSubject.isValidPublishSubject(bad), "\(bad)")
        }
        for good in ["a.*", "*.b", "a.>", ">", "*.*.>"] { #expect(NATSSubject.isValidSubscribeSubject(good), "\(good)") }
        for bad in ["a.>.b", ">.a", "a..*", ""] { #expect(!NATSSubject.isValidSubscribeSubject(bad), "\(bad)") }
    }

    @Test("URLs with credentials, tokens, IPv6 and default ports")
    func urls() throws {
        let full = try NATSServerAddress(url: "nats://alice:s%40cret@host.example:4333")
        #expect(full.host == "host.example" && full.port == 4333 && full.user == "alice" && full.password == "s@cret")
        let token = try NATSServerAddress(url: "nats://tok@10.0.0.1")
        #expect(token.token == "tok" && token.port == 4222 && token.user == nil)
        let bare = try NATSServerAddress(url: "127.0.0.1:4222")
        #expect(bare.host == "127.0.0.1" && bare.port == 4222)
        let v6 = try NATSServerAddress(url: "nats://[::1]:5000")
        #expect(v6.host == "::1" && v6.port == 5000 && v6.description == "[::1]:5000")
        for bad in ["tls://h:1", "nats://:4222", "nats://h:0", "nats://h:x", "nats://h:70000"] {
            #expect(throws: NATSClientError.invalidURL(bad)) { _ = try NATSServerAddress(url: bad) }
        }
    }
}
