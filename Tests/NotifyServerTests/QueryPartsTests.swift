import Foundation
import NIOCore
import NotifyTestSupport
import NotifyWire
import Testing

@testable import NotifyServer

/// Introspection answers longer than a frame: in parts for a client that asks for them, a clear error for one
/// that does not (PROTOCOL.md § 6.10). Without parts, 2,000 state names of 255 bytes set by any user made
/// `notifyctl names` fail for everyone.
@Suite("Query answers in parts", .timeLimit(.minutes(TestScale.minutes(2))))
struct QueryPartsTests {
    /// `count` names of 250 bytes, in sorted order.
    private static func longNames(_ count: Int) -> [String] {
        (0..<count).map { index in
            let number = String(index)
            return "org.example." + String(repeating: "n", count: 238 - number.count) + number
        }.sorted()
    }

    @Test("a names answer longer than a frame comes in parts that together list every name, each part within the frame limit")
    func namesInParts() async throws {
        try await withServer { server in
            let setter = try await server.connectRaw("setter")
            try await setter.hello()
            let names = Self.longNames(600)
            try await setter.send(names.enumerated().map { .setState(requestID: UInt32($0.offset + 1), name: $0.element, value: 7) })
            for index in names.indices {
                guard case .ok = try await setter.next() else { throw TestFailure("SET_STATE \(index) not acknowledged") }
            }

            let asker = try await server.connectRaw("asker")
            let welcome = try await asker.hello()
            try await asker.send(.query(requestID: 9, kind: QueryKind.names.rawValue | QueryKind.partsFlag, argument: ""))
            var listed: [String] = []
            var parts = 0
            while true {
                let frame = try await asker.next()
                let (json, isLast): (ByteBuffer, Bool)
                switch frame {
                case .queryResultPart(9, let part): (json, isLast) = (part, false)
                case .queryResult(9, let result): (json, isLast) = (result, true)
                default: throw TestFailure("expected QUERY_RESULT_PART or QUERY_RESULT for request 9, got \(frame.summary)")
                }
                #expect(1 + 4 + 4 + json.readableBytes <= Int(welcome.limits.maxFrameLength))
                let entries = try JSONDecoder().decode([DaemonName].self, from: Data(json.readableBytesView))
                listed += entries.map(\.name)
                if isLast { break }
                parts += 1
            }
            #expect(parts >= 1, "600 names of 250 bytes fit one frame?")
            #expect(listed == names)

            // A client that does not ask for parts gets an error that says what to do, and nothing else changes.
            try await asker.send(.query(requestID: 10, kind: QueryKind.names.rawValue, argument: ""))
            let error = try await asker.nextError()
            #expect(error.requestID == 10 && error.code == .invalidRequest && !error.closesConnection)
            #expect(error.message.contains("in parts"), "\(error.message)")
            try await asker.send(.query(requestID: 11, kind: QueryKind.names.rawValue, argument: names[0]))
            guard case .queryResult(11, _) = try await asker.next() else { throw TestFailure("a narrowed names query failed") }
        }
    }

    @Test("a status query with the parts flag is one QUERY_RESULT; an unknown kind with it names the kind")
    func statusAndUnknownKindWithParts() async throws {
        try await withServer { server in
            let asker = try await server.connectRaw("asker")
            try await asker.hello()
            try await asker.send(.query(requestID: 1, kind: QueryKind.status.rawValue | QueryKind.partsFlag, argument: ""))
            guard case .queryResult(1, _) = try await asker.next() else { throw TestFailure("status with parts flag") }
            try await asker.send(.query(requestID: 2, kind: 7 | QueryKind.partsFlag, argument: ""))
            let error = try await asker.nextError()
            #expect(error.code == .invalidRequest && error.message.contains("unknown query kind 7"), "\(error.message)")
        }
    }
}
