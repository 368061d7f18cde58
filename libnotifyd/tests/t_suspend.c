/* t_suspend: suspensions nest; posts while suspended are pended, and the last resume delivers exactly one
 * notification (descriptor, check and callback tokens); a waiting callback absorbs later posts. A sentinel name, not suspended, proves that all
 * posts have reached the process before each assertion. */
#define _GNU_SOURCE
#include "harness.h"
#include <arpa/inet.h>
#include <string.h>
#include <unistd.h>

static int sfd = -1, stoken;
static notifyd_queue_t *q;
static int calls;
static uint64_t merged;

static void on_note(int token, const notifyd_notification_t *n, void *ctx) { calls++; merged += n->merged; }

/* Posts the sentinel and waits for it: every earlier post has been handled by the reader thread. */
static void barrier(void) {
    CHECK_OK(notify_post("org.test.suspend.sentinel"));
    h_wait_readable(sfd, TIMEOUT_MS, "the sentinel");
    uint32_t v;
    CHECK(read(sfd, &v, 4) == 4 && (int)ntohl(v) == stoken);
}

static void expect_fd(int fd, int token, int count) {
    for (int i = 0; i < count; i++) {
        uint32_t v;
        CHECK(h_readable(fd), "expected delivery %d of %d", i + 1, count);
        CHECK(read(fd, &v, 4) == 4 && (int)ntohl(v) == token);
    }
    CHECK(!h_readable(fd), "more than %d deliveries", count);
}

int main(void) {
    h_start_daemon();
    q = notifyd_queue_create();
    int fd = -1, t, ct, cb, c;
    CHECK_OK(notify_register_file_descriptor("org.test.suspend.sentinel", &sfd, 0, &stoken));
    CHECK_OK(notify_register_file_descriptor("org.test.suspend", &fd, 0, &t));
    CHECK_OK(notify_register_check("org.test.suspend", &ct));
    CHECK_OK(notifyd_register_callback("org.test.suspend", &cb, q, on_note, NULL, NULL));
    CHECK_OK(notify_check(ct, &c));

    CHECK_OK(notify_suspend(t));
    CHECK_OK(notify_suspend(t));
    CHECK_OK(notify_suspend(ct));
    CHECK_OK(notify_suspend(cb));
    for (int i = 0; i < 200; i++) CHECK_OK(notify_post("org.test.suspend"));
    barrier();
    expect_fd(fd, t, 0);
    CHECK_OK(notify_check(ct, &c));
    CHECK(c == 0, "a suspended check token reports nothing");
    notifyd_queue_run(q);
    CHECK(calls == 0, "a suspended callback does not run");

    CHECK_OK(notify_resume(t));
    barrier();
    expect_fd(fd, t, 0); /* still suspended once */
    CHECK_OK(notify_resume(t));
    expect_fd(fd, t, 1); /* the last resume delivers, synchronously, once */
    CHECK_OK(notify_resume(ct));
    CHECK_OK(notify_check(ct, &c));
    CHECK(c == 1, "one delivery on resume");
    CHECK_OK(notify_check(ct, &c));
    CHECK(c == 0, "only one");
    CHECK_OK(notify_resume(cb));
    CHECK(notifyd_queue_run(q) == 1);
    CHECK(calls == 1, "one callback on resume, not %d", calls);
    CHECK(merged == 199, "it says 199 notifications were merged into it, not %llu", (unsigned long long)merged);
    barrier();
    expect_fd(fd, t, 0);
    CHECK(notifyd_queue_run(q) == 0);

    /* Resumed: delivered normally again; an extra resume is harmless. */
    CHECK_OK(notify_resume(t));
    CHECK_OK(notify_post("org.test.suspend"));
    barrier();
    expect_fd(fd, t, 1);
    /* Nothing posted while suspended: nothing on resume. */
    CHECK_OK(notify_suspend(t));
    barrier();
    CHECK_OK(notify_resume(t));
    expect_fd(fd, t, 0);

    /* Coalescing without suspension: posts that arrive while the callback waits to run merge into it. */
    notifyd_queue_run(q); /* the callback of the post above */
    calls = 0;
    merged = 0;
    for (int i = 0; i < 100; i++) CHECK_OK(notify_post("org.test.suspend"));
    barrier();
    CHECK(notifyd_queue_run(q) == 1);
    CHECK(calls == 1 && merged == 99, "%d callbacks, %llu merged", calls, (unsigned long long)merged);
    expect_fd(fd, t, 100); /* a descriptor token gets each one (the pipe has room) */

    CHECK_OK(notify_cancel(t));
    CHECK_OK(notify_cancel(ct));
    CHECK_OK(notify_cancel(cb));
    CHECK_OK(notify_cancel(stoken));
    notifyd_queue_run(q);
    CHECK_OK(notifyd_queue_destroy(q));
    PASS();
}
