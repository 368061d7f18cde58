import NIOCore
import NotifyWire
import Testing

@Suite("Protocol constants")
struct ProtocolConstantsTests {
    @Test("fixed numbers of PROTOCOL.md")
    func constants() {
        #expect(ProtocolConstants.version == 1)
        #expect(ProtocolConstants.lengthPrefixSize == 4)
        #expect(ProtocolConstants.minimumMaxFrameLength == 66_560)
        #expect(ProtocolConstants.maxClientNameLength == 255)
        #expect(ProtocolConstants.noRequest == 0)
        #expect(NotificationName.maxLength == 255)
    }

    @Test("message type bytes and names")
    func messageTypes() {
        let expected: [(MessageType, UInt8, String, Bool)] = [
            (.hello, 0x01, "HELLO", true), (.subscribe, 0x02, "SUBSCRIBE", true),
            (.unsubscribe, 0x03, "UNSUBSCRIBE", true), (.post, 0x04, "POST", true), (.ping, 0x05, "PING", true),
            (.setState, 0x06, "SET_STATE", true), (.getState, 0x07, "GET_STATE", true),
            (.suspend, 0x08, "SUSPEND", true), (.resume, 0x09, "RESUME", true), (.query, 0x0A, "QUERY", true),
            (.welcome, 0x81, "WELCOME", false), (.ok, 0x82, "OK", false), (.posted, 0x83, "POSTED", false),
            (.pong, 0x84, "PONG", false), (.notification, 0x85, "NOTIFICATION", false),
            (.overflow, 0x86, "OVERFLOW", false), (.state, 0x87, "STATE", false), (.goodbye, 0x88, "GOODBYE", false),
            (.notificationMerged, 0x89, "NOTIFICATION_MERGED", false), (.retained, 0x8A, "RETAINED", false),
            (.queryResult, 0x8B, "QUERY_RESULT", false), (.queryResultPart, 0x8C, "QUERY_RESULT_PART", false),
            (.stateChanged, 0x8D, "STATE_CHANGED", false), (.error, 0x8F, "ERROR", false),
        ]
        #expect(MessageType.allCases.count == expected.count)
        for (type, raw, name, clientToDaemon) in expected {
            #expect(type.rawValue == raw)
            #expect(type.description == name)
            #expect(type.isClientToDaemon == clientToDaemon)
        }
        #expect(PostFlags.ackWanted.rawValue == 0x01)
        #expect(PostFlags.retain.rawValue == 0x02)
        #expect(PostFlags.origin.rawValue == 0x04)
        #expect(PostFlags.known.rawValue == 0x07)
        #expect(SubscribeFlags.sendRetained.rawValue == 0x01)
        #expect(SubscribeFlags.states.rawValue == 0x02)
        #expect(SubscribeFlags.marksRetained.rawValue == 0x04)
        #expect(SubscribeFlags.known.rawValue == 0x07)
        #expect(QueryKind.status.rawValue == 1)
        #expect(QueryKind.names.rawValue == 2)
        #expect(QueryKind.clients.rawValue == 3)
        #expect(QueryKind.allCases.count == 3)
    }

    @Test("default limits, and they are consistent")
    func defaultLimits() {
        let limits = ServerLimits.default
        #expect(limits.maxNameLength == 255)
        #expect(limits.maxPayloadLength == 65_536)
        #expect(limits.maxFrameLength == 131_072)
        #expect(limits.maxSubscriptions == 65_536)
        // PROTOCOL.md § 11.1: every accepted post's NOTIFICATION fits in a frame.
        #expect(
            Int(limits.maxFrameLength) + 4
                >= NotificationFrame.encodedLength(
                    nameByteCount: Int(limits.maxNameLength), payloadByteCount: Int(limits.maxPayloadLength)))
        #expect(limits.maxFrameLength >= ProtocolConstants.minimumMaxFrameLength)
        // Before WELCOME: the largest default POST, and its NOTIFICATION, fit in the minimum.
        let largestPost = 12 + 255 + 65_536
        #expect(largestPost == 65_803)
        #expect(largestPost <= Int(ProtocolConstants.minimumMaxFrameLength))
        #expect(
            NotificationFrame.encodedLength(nameByteCount: 255, payloadByteCount: 65_536) - 4
                <= Int(ProtocolConstants.minimumMaxFrameLength))
        // PROTOCOL.md § 11.1: RETAINED is 4 and NOTIFICATION_MERGED 8 bytes longer than the NOTIFICATION; with
        // the defaults they still fit (65,822 and 65,826).
        let fields = NotificationFrame(
            sequence: 1, sender: SenderCredentials(pid: 1, uid: 1, gid: 1), name: String(repeating: "n", count: 255),
            payload: ByteBuffer(bytes: Array(repeating: 0, count: 65_536)))
        #expect(ServerFrame.retained(requestID: 1, fields).encodedBytes.count - 4 == 65_822)
        #expect(ServerFrame.notificationMerged(mergedCount: 1, fields).encodedBytes.count - 4 == 65_826)
        #expect(65_826 <= Int(ProtocolConstants.minimumMaxFrameLength))
    }

    @Test("limits that cannot carry the largest RETAINED or NOTIFICATION_MERGED are inconsistent")
    func limitsCoverLongerFrames() {
        // Exactly enough for the largest NOTIFICATION (27 + name + payload), 8 bytes short for its
        // NOTIFICATION_MERGED (35 + name + payload) and 4 for a RETAINED (31 + name + payload).
        let limits = ServerLimits(
            maxNameLength: 255, maxPayloadLength: 131_072 - 27 - 255, maxFrameLength: 131_072, maxSubscriptions: 1)
        #expect(!limits.inconsistencies.isEmpty)
        // And exactly enough for the largest NOTIFICATION_MERGED is consistent.
        let enough = ServerLimits(
            maxNameLength: 255, maxPayloadLength: 131_072 - 35 - 255, maxFrameLength: 131_072, maxSubscriptions: 1)
        #expect(enough.inconsistencies.isEmpty)
    }

    @Test("instance id text form and randomness")
    func instanceID() {
        let id = InstanceID(high: 0x0011_2233_4455_6677, low: 0x8899_AABB_CCDD_EEFF)
        #expect(id.description == "00112233445566778899aabbccddeeff")
        #expect(InstanceID(high: 0, low: 1).description == "00000000000000000000000000000001")
        let ids = Set((0..<8).map { _ in InstanceID.random() })
        #expect(ids.count == 8)
    }

    @Test("sender credentials description")
    func senderDescription() {
        #expect(SenderCredentials(pid: 1, uid: 2, gid: 3).description == "pid 1 uid 2 gid 3")
    }

    @Test("socket path resolution (PROTOCOL.md § 1)")
    func socketPath() {
        #expect(SocketLocation.environmentVariable == "NOTIFYD_SOCKET")
        #expect(SocketLocation.systemPath == "/run/notifyd/notifyd.sock")
        #expect(SocketLocation.defaultPath(uid: 1000, environment: ["NOTIFYD_SOCKET": "/x.sock"]) == "/x.sock")
        #expect(
            SocketLocation.defaultPath(uid: 0, environment: ["NOTIFYD_SOCKET": "/x.sock", "XDG_RUNTIME_DIR": "/r"])
                == "/x.sock")
        #expect(SocketLocation.defaultPath(uid: 0, environment: ["XDG_RUNTIME_DIR": "/run/user/0"]) == "/run/notifyd/notifyd.sock")
        #expect(
            SocketLocation.defaultPath(uid: 1000, environment: ["XDG_RUNTIME_DIR": "/run/user/1000"])
                == "/run/user/1000/notifyd/notifyd.sock")
        #expect(
            SocketLocation.defaultPath(uid: 1000, environment: ["NOTIFYD_SOCKET": "", "XDG_RUNTIME_DIR": ""])
                == "/tmp/notifyd-1000/notifyd.sock")
        #expect(SocketLocation.defaultPath(uid: 1000, environment: [:]) == "/tmp/notifyd-1000/notifyd.sock")
    }
}
