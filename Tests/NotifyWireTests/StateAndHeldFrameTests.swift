import NotifyWire
import Testing

@Suite("STATE, NOTIFICATION_MERGED, RETAINED and OVERFLOW fields; retain flag bits")
struct StateAndHeldFrameTests {
    @Test("STATE: has_value is bit 0 of flags; reserved bits are ignored, value is ignored without has_value")
    func stateFlags() throws {
        var bytes = try VectorFile.load("state.hex").bytes
        #expect(bytes[9] == 0x01)
        bytes[9] = 0xFF
        #expect(decodeOne(bytes, as: ServerFrame.self).frame == .state(requestID: 12, value: 4_294_967_338))
        bytes[9] = 0xFE
        #expect(decodeOne(bytes, as: ServerFrame.self).frame == .state(requestID: 12, value: nil))
        // Without a value the daemon sends value 0.
        let unset = ServerFrame.state(requestID: 1, value: nil).encodedBytes
        #expect(Array(unset[9...]) == [0, 0, 0, 0, 0, 0, 0, 0, 0])
    }

    @Test("NOTIFICATION_MERGED and RETAINED carry exactly the NOTIFICATION fields after their first field")
    func sharedNotificationFields() throws {
        let notification = try VectorFile.load("notification.hex").bytes
        let retained = try VectorFile.load("retained.hex").bytes
        // RETAINED = NOTIFICATION's fields with a u32 request_id in front (length + 4).
        #expect(Array(retained[9...]) == Array(notification[5...]))
        #expect(retained.count == notification.count + 4)
        // NOTIFICATION_MERGED = a u64 merged_count in front (length + 8); only the sequence differs here.
        let fields = NotificationFrame(
            sequence: 47, sender: SenderCredentials(pid: 1234, uid: 1000, gid: 100), name: GoldenVectors.batteryLow,
            payload: GoldenVectors.levelPayload)
        let merged = try VectorFile.load("notification-merged.hex").bytes
        #expect(Array(merged[13...]) == Array(ServerFrame.notification(fields).encodedBytes[5...]))
        #expect(merged.count == ServerFrame.notification(fields).encodedBytes.count + 8)
    }

    @Test("OVERFLOW: subscription id 0 is the connection as a whole")
    func overflowLayout() throws {
        let perSubscription = try VectorFile.load("overflow.hex").bytes
        #expect(Array(perSubscription[5..<9]) == [0, 0, 0, 9])
        let connectionWide = try VectorFile.load("overflow-connection.hex").bytes
        #expect(Array(connectionWide[5..<9]) == [0, 0, 0, 0])
    }

    @Test("POST retain is bit 1, SUBSCRIBE send-retained is bit 0 of their flags byte")
    func flagBits() throws {
        #expect(try VectorFile.load("post-retain.hex").bytes[9] == 0x02)
        let subscribe = try VectorFile.load("subscribe-pattern-queue.hex").bytes
        #expect(subscribe[13] == 0x01)  // flags
        #expect(subscribe[14] == 0x01)  // policy: queue
        #expect(Array(subscribe[15..<19]) == [0, 0, 0, 100])  // queue_limit
    }
}
