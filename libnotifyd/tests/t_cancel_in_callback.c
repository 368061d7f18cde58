/* t_cancel_in_callback: a callback may cancel its own token (on the library's callback thread and on a
 * caller's queue); it is not called again afterwards, and a callback waiting on a queue when its token is
 * cancelled never runs. */
#define _GNU_SOURCE
#include "harness.h"
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int calls, cancel_status = -1, sentinel;
static atomic_int stream_calls;

static void self_cancel(int token, const notifyd_notification_t *n, void *ctx) {
    uint32_t st = notify_cancel(token);
    pthread_mutex_lock(&mu);
    calls++;
    cancel_status = (int)st;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_sentinel(int token, const notifyd_notification_t *n, void *ctx) {
    pthread_mutex_lock(&mu);
    sentinel++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_stream(int token, const notifyd_notification_t *n, void *ctx) {
    atomic_fetch_add(&stream_calls, 1);
}

static void wait_for(int *var, int value, const char *what) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += TIMEOUT_MS / 1000;
    pthread_mutex_lock(&mu);
    while (*var < value)
        if (pthread_cond_timedwait(&cv, &mu, &until) != 0) { pthread_mutex_unlock(&mu); FAIL("timed out waiting for %s", what); }
    pthread_mutex_unlock(&mu);
}

int main(void) {
    h_start_daemon();
    /* On the library's callback thread. */
    int t, s;
    CHECK_OK(notifyd_register_callback("org.test.cancelcb", &t, NULL, self_cancel, NULL, NULL));
    CHECK_OK(notifyd_register_callback("org.test.cancelcb.sentinel", &s, NULL, on_sentinel, NULL, NULL));
    CHECK_OK(notify_post("org.test.cancelcb"));
    wait_for(&calls, 1, "the callback");
    CHECK(cancel_status == NOTIFY_STATUS_OK, "cancel inside the callback returned %d", cancel_status);
    CHECK(!notify_is_valid_token(t));
    CHECK_OK(notify_post("org.test.cancelcb"));
    CHECK_OK(notify_post("org.test.cancelcb.sentinel"));
    wait_for(&sentinel, 1, "the sentinel");
    CHECK(calls == 1, "called %d times after cancelling itself", calls);

    /* On a caller's queue, run by this thread. */
    notifyd_queue_t *q = notifyd_queue_create();
    CHECK_OK(notifyd_register_callback("org.test.cancelcb.q", &t, q, self_cancel, NULL, NULL));
    CHECK_OK(notify_post("org.test.cancelcb.q"));
    CHECK_OK(notify_post("org.test.cancelcb.q"));
    while (calls < 2) {
        h_wait_readable(notifyd_queue_fd(q), TIMEOUT_MS, "the queued callback");
        notifyd_queue_run(q);
    }
    CHECK_OK(notify_post("org.test.cancelcb.sentinel"));
    wait_for(&sentinel, 2, "the sentinel");
    notifyd_queue_run(q);
    CHECK(calls == 2, "the queued callback ran %d times", calls - 1);
    CHECK_OK(notifyd_queue_destroy(q));

    /* Cancelled while its callback waits on the queue: the callback never starts. (On a queue that this
     * thread runs, so "after notify_cancel returned" is exact, not a race.) */
    q = notifyd_queue_create();
    for (int round = 0; round < 20; round++) {
        atomic_store(&stream_calls, 0);
        CHECK_OK(notifyd_register_callback("org.test.cancelcb.stream", &t, q, on_stream, NULL, NULL));
        for (int i = 0; i < 50; i++) CHECK_OK(notify_post("org.test.cancelcb.stream"));
        h_wait_readable(notifyd_queue_fd(q), TIMEOUT_MS, "a waiting callback");
        CHECK_OK(notify_cancel(t));
        int before = sentinel;
        CHECK_OK(notify_post("org.test.cancelcb.sentinel"));
        wait_for(&sentinel, before + 1, "the sentinel"); /* the other 49 posts have arrived too */
        notifyd_queue_run(q);
        CHECK(atomic_load(&stream_calls) == 0, "round %d: a callback ran after notify_cancel", round);
    }
    CHECK_OK(notifyd_queue_destroy(q));
    CHECK_OK(notify_cancel(s));
    PASS();
}
