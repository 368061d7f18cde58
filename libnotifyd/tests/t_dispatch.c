/* t_dispatch: notify_register_dispatch (built when libdispatch is found): the handler runs on the given
 * queue with its token, once per post, and a handler that cancels its own token is not called again. */
#include "harness.h"
#include <dispatch/dispatch.h>
#include <stdatomic.h>

static int t = NOTIFY_TOKEN_INVALID; /* a global: the handler must read the value the call stored */

int main(void) {
    h_start_daemon();
    dispatch_queue_t queue = dispatch_queue_create("t_dispatch", DISPATCH_QUEUE_SERIAL);
    dispatch_semaphore_t sem = dispatch_semaphore_create(0);
    __block int calls = 0, wrong = 0, self_cancel_calls = 0, sentinel = 0;
    int c, s;
    CHECK_OK(notify_register_dispatch("org.test.dispatch", &t, queue, ^(int token) {
        if (token != t) wrong++;
        calls++;
        dispatch_semaphore_signal(sem);
    }));
    CHECK_OK(notify_register_dispatch("org.test.dispatch.cancel", &c, queue, ^(int token) {
        self_cancel_calls++;
        if (notify_cancel(token) != NOTIFY_STATUS_OK) wrong++;
        dispatch_semaphore_signal(sem);
    }));
    CHECK_OK(notify_register_dispatch("org.test.dispatch.sentinel", &s, queue, ^(int token) {
        sentinel++;
        dispatch_semaphore_signal(sem);
    }));
    for (int i = 1; i <= 3; i++) {
        CHECK_OK(notify_post("org.test.dispatch"));
        CHECK(dispatch_semaphore_wait(sem, dispatch_time(DISPATCH_TIME_NOW, (int64_t)TIMEOUT_MS * 1000000)) == 0,
              "timed out waiting for handler call %d", i);
    }
    CHECK_OK(notify_post("org.test.dispatch.cancel"));
    CHECK(dispatch_semaphore_wait(sem, dispatch_time(DISPATCH_TIME_NOW, (int64_t)TIMEOUT_MS * 1000000)) == 0);
    CHECK_OK(notify_post("org.test.dispatch.cancel"));
    CHECK_OK(notify_post("org.test.dispatch.sentinel"));
    CHECK(dispatch_semaphore_wait(sem, dispatch_time(DISPATCH_TIME_NOW, (int64_t)TIMEOUT_MS * 1000000)) == 0);
    dispatch_sync(queue, ^{});
    CHECK(calls == 3 && wrong == 0, "calls %d, wrong %d", calls, wrong);
    CHECK(self_cancel_calls == 1, "the handler that cancelled itself ran %d times", self_cancel_calls);
    CHECK(sentinel == 1);
    CHECK_OK(notify_cancel(t));
    CHECK_OK(notify_cancel(s));
    CHECK(notify_register_dispatch("org..bad", &t, queue, ^(int token) {}) == NOTIFY_STATUS_INVALID_NAME);
    dispatch_release(sem);
    dispatch_release(queue);
    PASS();
}
