#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import NIOConcurrencyHelpers
import NotifyServer
import NotifySystemd
import ServiceLifecycle
import UnixSignals

/// Re-reads the configuration on SIGHUP and applies its reserved prefixes and quotas without dropping any
/// client. Tells the service manager `RELOADING=1` and then `READY=1`. A file that does not parse is logged and
/// the previous configuration stays in force; a default location that holds no file (any more) means the
/// defaults. Always runs, whether or not a file existed at start: SIGHUP must never end the daemon.
struct ConfigurationReloader: Service, CustomStringConvertible {
    let source: ConfigurationSource
    let server: NotifyServer
    let notifier: ServiceManagerNotifier
    let logger: Logger

    var description: String { "ConfigurationReloader(\(source))" }

    /// Makes SIGHUP harmless from the first instruction on: its default action ends the process, and the signal
    /// sequence below is set up only once the service group runs, after READY=1 may have gone out.
    static func ignoreHangupUntilTrapped() {
        signal(SIGHUP, SIG_IGN)
    }

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
        guard let loaded = await loadUnlessShuttingDown() else {
            logger.warning("configuration reload abandoned: the daemon is stopping", metadata: ["config": "\(source)"])
            return
        }
        do throws(ConfigurationError) {
            if let configuration = try loaded.get() {
                await server.updateAccess(configuration)
                await server.noteReload(error: nil)
                logger.notice(
                    "configuration reloaded",
                    metadata: ["config": "\(source)", "rules": "\(configuration.rules.count)"])
                _ = try? notifier.send("READY=1\nSTATUS=configuration reloaded")
            } else {
                await server.updateAccess(AccessConfiguration())
                await server.noteReload(error: nil)
                logger.notice("configuration reloaded: no configuration file, the defaults apply",
                    metadata: ["config": "\(source)"])
                _ = try? notifier.send("READY=1\nSTATUS=configuration reloaded (no file: defaults)")
            }
        } catch {
            await server.noteReload(error: error.description)
            logger.error("configuration not reloaded, keeping the previous one", metadata: ["error": "\(error)"])
            _ = try? notifier.send("READY=1\nSTATUS=configuration reload failed: \(error.description)")
        }
    }

    /// Reads the file on a thread of its own and stops waiting for it at a graceful shutdown (`nil`): its `owner=`
    /// and `group=` names go through NSS, and the file may sit on a mount that hangs; neither may hold up SIGTERM.
    private func loadUnlessShuttingDown() async -> Result<AccessConfiguration?, ConfigurationError>? {
        typealias Outcome = Result<AccessConfiguration?, ConfigurationError>?
        let waiter = NIOLockedValueBox<(continuation: CheckedContinuation<Outcome, Never>?, shuttingDown: Bool)>(
            (nil, false))
        let source = self.source
        return await withTaskCancellationOrGracefulShutdownHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
                let stopping = waiter.withLockedValue { state -> Bool in
                    if state.shuttingDown { return true }
                    state.continuation = continuation
                    return false
                }
                if stopping {
                    continuation.resume(returning: nil)
                    return
                }
                let thread = Thread {
                    let loaded: Outcome = Result { () throws(ConfigurationError) in try source.load() }
                    waiter.withLockedValue { state in
                        defer { state.continuation = nil }
                        return state.continuation
                    }?.resume(returning: loaded)
                }
                thread.name = "notifyd-reload"
                thread.start()
            }
        } onCancelOrGracefulShutdown: {
            waiter.withLockedValue { state in
                state.shuttingDown = true
                defer { state.continuation = nil }
                return state.continuation
            }?.resume(returning: nil)
        }
    }
}
