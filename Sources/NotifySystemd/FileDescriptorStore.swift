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

    /// Which bus to ask the service manager on.
    package enum Bus: Sendable {
        /// The system bus (the D-Bus daemon).
        case system
        /// The user's bus (for a unit of a user's manager).
        case user
        /// The manager's own socket (`/run/systemd/private`, or `$XDG_RUNTIME_DIR/systemd/private` for a
        /// user's manager): needs no D-Bus daemon, but only the manager's user may connect.
        case managerSocket(String)
    }

    /// Asks the service manager about the unit process `pid` belongs to (found with `GetUnitByPID`, which needs
    /// no `/proc`: the unit's `ProtectProc=` hides it).
    package static func of(pid: Int32, on busChoice: Bus, timeoutMicroseconds: UInt64 = 2_000_000) throws(SystemdError)
        -> ServiceJob
    {
        var bus: OpaquePointer?
        let opened: Int32
        switch busChoice {
        case .system: opened = sd_bus_open_system(&bus)
        case .user: opened = sd_bus_open_user(&bus)
        case .managerSocket(let path):
            var created = sd_bus_new(&bus)
            if created >= 0 { created = sd_bus_set_address(bus, "unix:path=\(path)") }
            if created >= 0 { created = sd_bus_start(bus) }
            opened = created
        }
        guard opened >= 0, let bus else { throw .serviceQueryFailed("no bus: \(SystemdError.describe(errno: -opened))") }
        defer { sd_bus_flush_close_unref(bus) }
        _ = sd_bus_set_method_call_timeout(bus, timeoutMicroseconds)

        var error = sd_bus_error(name: nil, message: nil, _need_free: 0)
        defer { sd_bus_error_free(&error) }
        var call: OpaquePointer?
        guard sd_bus_message_new_method_call(
            bus, &call, "org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager",
            "GetUnitByPID") >= 0, let call
        else { throw .serviceQueryFailed("cannot build the GetUnitByPID call") }
        defer { sd_bus_message_unref(call) }
        var pidArgument = UInt32(bitPattern: pid)
        guard sd_bus_message_append_basic(call, CChar(UInt8(ascii: "u")), &pidArgument) >= 0 else {
            throw .serviceQueryFailed("cannot build the GetUnitByPID call")
        }
        var unitReply: OpaquePointer?
        let called = sd_bus_call(bus, call, 0, &error, &unitReply)
        guard called >= 0, let unitReply else { throw .serviceQueryFailed(Self.describe(error, called)) }
        defer { sd_bus_message_unref(unitReply) }
        var unitPathPointer: UnsafePointer<CChar>?
        guard sd_bus_message_read_basic(unitReply, CChar(UInt8(ascii: "o")), &unitPathPointer) >= 0,
            let unitPathPointer
        else { throw .serviceQueryFailed("unexpected answer to GetUnitByPID") }
        let unitPath = String(cString: unitPathPointer)

        var idText: UnsafeMutablePointer<CChar>?
        let named = sd_bus_get_property_string(
            bus, "org.freedesktop.systemd1", unitPath, "org.freedesktop.systemd1.Unit", "Id", &error, &idText)
        guard named >= 0, let idText else { throw .serviceQueryFailed(Self.describe(error, named)) }
        let unit = String(cString: idText)
        free(idText)

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
