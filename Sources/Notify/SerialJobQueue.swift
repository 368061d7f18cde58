import NIOConcurrencyHelpers

/// Runs jobs one at a time, in submission order, on top of a scheduling primitive that by itself promises
/// neither (an `OperationQueue` may be concurrent, a run loop's timers or an actor's tasks may be reordered).
///
/// At most one drain step is scheduled at any moment; each step runs one job and schedules the next, so the
/// target stays responsive to other work between jobs (a job is one read burst's notifications for one
/// observation, see ``DeliveryStaging``).
final class SerialJobQueue: Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var head = 0
        var isScheduled = false
    }

    private let state = NIOLockedValueBox(State())
    private let schedule: @Sendable (@escaping @Sendable () -> Void) -> Void

    /// - Parameter schedule: runs the given step later on the target (must not run it synchronously).
    init(schedule: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.schedule = schedule
    }

    func enqueue(_ job: @escaping @Sendable () -> Void) {
        let mustSchedule = state.withLockedValue { state -> Bool in
            state.jobs.append(job)
            if state.isScheduled { return false }
            state.isScheduled = true
            return true
        }
        if mustSchedule { schedule { self.runNext() } }
    }

    private func runNext() {
        let job = state.withLockedValue { state -> (@Sendable () -> Void)? in
            guard state.head < state.jobs.count else {
                state.isScheduled = false
                return nil
            }
            let job = state.jobs[state.head]
            state.head += 1
            if state.head == state.jobs.count {
                state.jobs.removeAll(keepingCapacity: true)
                state.head = 0
            } else if state.head >= 1024, state.head * 2 >= state.jobs.count {
                state.jobs.removeFirst(state.head)
                state.head = 0
            }
            return job
        }
        guard let job else { return }
        job()
        let more = state.withLockedValue { state -> Bool in
            if state.head < state.jobs.count { return true }
            state.isScheduled = false
            return false
        }
        if more { schedule { self.runNext() } }
    }
}
