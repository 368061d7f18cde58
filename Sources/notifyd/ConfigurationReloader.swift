#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import NotifyServer
import NotifySystemd
import ServiceLifecycle
import UnixSignals

/// Re-reads the configuration file on SIGHUP and applies its reserved prefixes and quotas without dropping
/// any client. Tells the service manager `RELOADING=1` and then `READY=1`; a file that does not parse is
/// logged and the previous configuration stays in force.
struct ConfigurationReloader: Service, CustomStringConvertible {
    let path: String
    let server: NotifyServer
    let notifier: ServiceManagerNotifier
    let logger: Logger

    var description: String { "ConfigurationReloader(\(path))" }

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        // Ends with the service group's graceful shutdown, so SIGTERM is not held up by this loop.
        for await _ in signals.cancelOnGracefulShutdown() {
            await reload()
        }
    }

    private func reload() async {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let monotonic = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
        _ = try? notifier.send("RELOADING=1\nMONOTONIC_USEC=\(monotonic)")
        do throws(ConfigurationError) {
            let configuration = try AccessConfiguration.load(path: path)
            await server.updateAccess(configuration)
            logger.notice(
                "configuration reloaded",
                metadata: ["config": "\(path)", "rules": "\(configuration.rules.count)"])
            _ = try? notifier.send("READY=1\nSTATUS=configuration reloaded")
        } catch {
            logger.error("configuration not reloaded, keeping the previous one", metadata: ["error": "\(error)"])
            _ = try? notifier.send("READY=1\nSTATUS=configuration reload failed: \(error.description)")
        }
    }
}
