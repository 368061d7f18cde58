#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSystemd

/// systemd's file descriptor store (`FDSTORE=1`, systemd's `FILE_DESCRIPTOR_STORE.md`): descriptors the service
/// manager keeps for this service and passes back, with their names, to the next process it starts for it.
package enum FileDescriptorStore {
    /// The most descriptors one message may carry (the kernel's `SCM_MAX_FD`).
    static let descriptorsPerMessage = 253

    /// Stores `descriptors` under `name`, in as many messages as needed, then waits until the service manager
    /// has taken them (`sd_notify_barrier`): the process may exit right after.
    package static func store(_ descriptors: [CInt], name: String) throws(SystemdError) {
        var start = 0
        while start < descriptors.count {
            let batch = Array(descriptors[start..<min(start + descriptorsPerMessage, descriptors.count)])
            let result = batch.withUnsafeBufferPointer { pointer in
                sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=\(name)", pointer.baseAddress, UInt32(pointer.count))
            }
            if result < 0 { throw .fileDescriptorStoreFailed(errno: -result) }
            if result == 0 { throw .fileDescriptorStoreFailed(errno: ENOTCONN) }
            start += batch.count
        }
        // Five seconds: the manager answers at once unless it is busy with thousands of units.
        let barrier = sd_notify_barrier(0, 5_000_000)
        if barrier < 0 { throw .fileDescriptorStoreFailed(errno: -barrier) }
    }

    /// Removes every descriptor stored under `name` (the service has taken them over).
    package static func remove(name: String) {
        _ = sd_pid_notify(0, 0, "FDSTOREREMOVE=1\nFDNAME=\(name)")
    }
}

/// What the service manager is doing with this service, asked over the system bus (`org.freedesktop.systemd1`):
/// a process being stopped learns whether it will be started again (a restart job) or not (a stop job), and
/// how many descriptors its store may hold. Blocking: call it off the event loop.
package struct ServiceJob: Sendable, Equatable {
    /// The service's unit name.
    package var unit: String
    /// The type of the job running on the unit (`restart`, `stop`, ...), or `nil` when none runs (the process
    /// was signalled directly).
    package var type: String?
    /// `FileDescriptorStoreMax=`.
    package var fileDescriptorStoreMax: UInt32

    /// Whether the job starts the service again right after stopping it.
    package var isRestart: Bool {
        ["restart", "try-restart", "reload-or-restart", "reload-or-try-restart"].contains(type ?? "")
    }

    /// Creates a description (for tests).
    package init(unit: String, type: String?, fileDescriptorStoreMax: UInt32) {
        self.unit = unit
        self.type = type
        self.fileDescriptorStoreMax = fileDescriptorStoreMax
    }

    /// Asks the service manager about the unit this process belongs to.
    package static func current(timeoutMicroseconds: UInt64 = 2_000_000) throws(SystemdError) -> ServiceJob {
        var unitName: UnsafeMutablePointer<CChar>?
        let found = sd_pid_get_unit(0, &unitName)
        guard found >= 0, let unitName else { throw .serviceQueryFailed("not in a systemd unit (\(SystemdError.describe(errno: -found)))") }
        let unit = String(cString: unitName)
        free(unitName)

        var bus: OpaquePointer?
        let opened = sd_bus_open_system(&bus)
        guard opened >= 0, let bus else { throw .serviceQueryFailed("no system bus: \(SystemdError.describe(errno: -opened))") }
        defer { sd_bus_flush_close_unref(bus) }
        _ = sd_bus_set_method_call_timeout(bus, timeoutMicroseconds)

        var unitPath: UnsafeMutablePointer<CChar>?
        guard sd_bus_path_encode("/org/freedesktop/systemd1/unit", unit, &unitPath) >= 0, let unitPath else {
            throw .serviceQueryFailed("cannot encode the unit name \(unit)")
        }
        defer { free(unitPath) }

        var error = sd_bus_error(name: nil, message: nil, _need_free: 0)
        defer { sd_bus_error_free(&error) }
        var reply: OpaquePointer?
        let asked = sd_bus_get_property(
            bus, "org.freedesktop.systemd1", unitPath, "org.freedesktop.systemd1.Unit", "Job", &error, &reply, "(uo)")
        guard asked >= 0, let reply else { throw .serviceQueryFailed(Self.describe(error, asked)) }
        defer { sd_bus_message_unref(reply) }
        var jobID: UInt32 = 0
        var jobPath: UnsafePointer<CChar>?
        guard sd_bus_message_enter_container(reply, CChar(UInt8(ascii: "r")), "uo") >= 0,
            sd_bus_message_read_basic(reply, CChar(UInt8(ascii: "u")), &jobID) >= 0,
            sd_bus_message_read_basic(reply, CChar(UInt8(ascii: "o")), &jobPath) >= 0, let jobPath
        else { throw .serviceQueryFailed("unexpected answer for the unit's job") }

        var type: String?
        if jobID != 0 {
            var text: UnsafeMutablePointer<CChar>?
            let typed = sd_bus_get_property_string(
                bus, "org.freedesktop.systemd1", jobPath, "org.freedesktop.systemd1.Job", "JobType", &error, &text)
            guard typed >= 0, let text else { throw .serviceQueryFailed(Self.describe(error, typed)) }
            type = String(cString: text)
            free(text)
        }
        var storeMax: UInt32 = 0
        let stored = sd_bus_get_property_trivial(
            bus, "org.freedesktop.systemd1", unitPath, "org.freedesktop.systemd1.Service", "FileDescriptorStoreMax",
            &error, CChar(UInt8(ascii: "u")), &storeMax)
        guard stored >= 0 else { throw .serviceQueryFailed(Self.describe(error, stored)) }
        return ServiceJob(unit: unit, type: type, fileDescriptorStoreMax: storeMax)
    }

    private static func describe(_ error: sd_bus_error, _ result: Int32) -> String {
        if let message = error.message { return String(cString: message) }
        return SystemdError.describe(errno: -result)
    }
}
