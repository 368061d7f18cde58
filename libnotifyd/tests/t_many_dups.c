/* t_many_dups: 500 registrations of one name, one post: each token gets exactly one delivery (callbacks,
 * check tokens and descriptor tokens), and the 500 share one subscription in the daemon. */
#define _GNU_SOURCE
#include "harness.h"
#include <arpa/inet.h>
#include <string.h>
#include <unistd.h>

#define N 500
static int counts[N], tokens[N], sentinel_seen;

static void on_note(int token, const notifyd_notification_t *n, void *ctx) {
    int i = (int)(long)ctx;
    if (i == -1) { sentinel_seen++; return; }
    if (tokens[i] != token) FAIL("callback %d got token %d", tokens[i], token);
    counts[i]++;
}

/* Runs the queue until `done` says so; fails after the timeout. */
static void run_until(notifyd_queue_t *q, int (*done)(void), const char *what) {
    while (!done()) {
        h_wait_readable(notifyd_queue_fd(q), TIMEOUT_MS, what);
        notifyd_queue_run(q);
    }
}
static int all_once(void) { for (int i = 0; i < N; i++) if (counts[i] < 1) return 0; return 1; }
static int sentinel(void) { return sentinel_seen > 0; }

int main(void) {
    h_start_daemon();
    notifyd_queue_t *q = notifyd_queue_create();
    CHECK(q);
    int checks[N], fd = -1, fdtokens[N];
    for (int i = 0; i < N; i++) {
        CHECK_OK(notifyd_register_callback("org.test.dups", &tokens[i], q, on_note, (void *)(long)i, NULL));
        CHECK_OK(notify_register_check("org.test.dups", &checks[i]));
        CHECK_OK(notify_register_file_descriptor("org.test.dups", &fd, i ? NOTIFY_REUSE : 0, &fdtokens[i]));
    }
    int c;
    for (int i = 0; i < N; i++) CHECK_OK(notify_check(checks[i], &c)); /* consume the first "true" */
    CHECK(h_status("subscriptions") == 1, "1,500 tokens of one name share one subscription");

    CHECK_OK(notify_post("org.test.dups"));
    run_until(q, all_once, "500 callbacks");
    /* One more post of another name, after: once it arrives, any duplicate would have arrived too. */
    int st;
    CHECK_OK(notifyd_register_callback("org.test.dups.sentinel", &st, q, on_note, (void *)-1L, NULL));
    CHECK_OK(notify_post("org.test.dups.sentinel"));
    run_until(q, sentinel, "the sentinel");
    for (int i = 0; i < N; i++) CHECK(counts[i] == 1, "token %d: %d deliveries", tokens[i], counts[i]);
    for (int i = 0; i < N; i++) {
        CHECK_OK(notify_check(checks[i], &c));
        CHECK(c == 1, "check token %d", i);
        CHECK_OK(notify_check(checks[i], &c));
        CHECK(c == 0);
    }
    static int seen[N];
    for (int k = 0; k < N; k++) {
        uint32_t v;
        h_wait_readable(fd, TIMEOUT_MS, "a token on the descriptor");
        CHECK(read(fd, &v, 4) == 4);
        int t = (int)ntohl(v), found = 0;
        for (int i = 0; i < N; i++) if (fdtokens[i] == t) { seen[i]++; found = 1; }
        CHECK(found, "unknown token %d on the descriptor", t);
    }
    CHECK(!h_readable(fd), "no more than 500 tokens on the descriptor");
    for (int i = 0; i < N; i++) CHECK(seen[i] == 1, "descriptor token %d seen %d times", i, seen[i]);

    for (int i = 0; i < N; i++) {
        CHECK_OK(notify_cancel(tokens[i]));
        CHECK_OK(notify_cancel(checks[i]));
        CHECK_OK(notify_cancel(fdtokens[i]));
    }
    CHECK_OK(notify_cancel(st));
    notifyd_queue_run(q);
    CHECK_OK(notifyd_queue_destroy(q));
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    CHECK(h_status("subscriptions") == 0);
    PASS();
}
