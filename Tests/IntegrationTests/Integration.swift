import NotifyTestSupport
import Testing

/// The integration tests: the real `notifyd`, `notifyctl` and `notify-test-peer` executables talking over a
/// Unix socket in a temporary directory.
///
/// The tests run one at a time: each starts several processes, and on a small machine running them side by side
/// would only make them slower and harder to diagnose.
@Suite(.serialized, .timeLimit(.minutes(TestScale.minutes(2))))
enum Integration {}
