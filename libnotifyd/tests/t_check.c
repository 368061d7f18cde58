/* t_check: notify_check works on every kind of token (check, descriptor, signal, callback): true on the
 * first call, then true exactly once after each post. */
#define _GNU_SOURCE
#include "harness.h"
#include <signal.h>
#include <unistd.h>

static void on_note(int token, const notifyd_notification_t *n, void *ctx) {}

int main(void) {
    h_start_daemon();
    signal(SIGUSR2, SIG_IGN);
    int efd = notifyd_connection_fd();
    int tok[4], fd = -1, c;
    notifyd_queue_t *q = notifyd_queue_create();
    CHECK_OK(notify_register_check("org.test.check", &tok[0]));
    CHECK_OK(notify_register_file_descriptor("org.test.check", &fd, 0, &tok[1]));
    CHECK_OK(notify_register_signal("org.test.check", SIGUSR2, &tok[2]));
    CHECK_OK(notifyd_register_callback("org.test.check", &tok[3], q, on_note, NULL, NULL));
    for (int k = 0; k < 4; k++) {
        CHECK_OK(notify_check(tok[k], &c));
        CHECK(c == 1, "kind %d: true on the first call", k);
        CHECK_OK(notify_check(tok[k], &c));
        CHECK(c == 0, "kind %d: then false", k);
    }
    for (int round = 0; round < 5; round++) {
        CHECK_OK(notify_post("org.test.check"));
        /* The library signals efd once per notification it routes. */
        h_wait_readable(efd, TIMEOUT_MS, "the notification");
        uint64_t n;
        CHECK(read(efd, &n, sizeof n) == sizeof n);
        for (int k = 0; k < 4; k++) {
            CHECK_OK(notify_check(tok[k], &c));
            CHECK(c == 1, "kind %d: true after post %d", k, round);
            CHECK_OK(notify_check(tok[k], &c));
            CHECK(c == 0, "kind %d: once", k);
        }
    }
    CHECK(notify_check(tok[0], NULL) == NOTIFY_STATUS_NULL_INPUT);
    for (int k = 0; k < 4; k++) CHECK_OK(notify_cancel(tok[k]));
    notifyd_queue_run(q);
    CHECK_OK(notifyd_queue_destroy(q));
    PASS();
}
