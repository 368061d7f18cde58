/* t_restart: the daemon is killed with SIGKILL (and later stopped with SIGTERM, which says GOODBYE) and
 * started again on the same socket: while it is down calls fail promptly with SERVER_NOT_FOUND; once it is
 * back the library has reconnected by itself, every registration fires again (descriptor, check,
 * callback, pattern) and the state values this process set are back. */
#define _GNU_SOURCE
#include "harness.h"
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int exact_calls, pattern_calls;

static void on_note(int token, const notifyd_notification_t *n, void *ctx) {
    pthread_mutex_lock(&mu);
    if (ctx) pattern_calls++; else exact_calls++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void wait_calls(int exact, int pattern) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += TIMEOUT_MS / 1000;
    pthread_mutex_lock(&mu);
    while (exact_calls < exact || pattern_calls < pattern)
        if (pthread_cond_timedwait(&cv, &mu, &until) != 0)
            FAIL("timed out: %d/%d exact and %d/%d pattern callbacks", exact_calls, exact, pattern_calls, pattern);
    pthread_mutex_unlock(&mu);
}

int main(void) {
    h_start_daemon();
    int fd = -1, ft, ct, cb, pt, st, c;
    CHECK_OK(notify_register_file_descriptor("org.test.restart", &fd, 0, &ft));
    CHECK_OK(notify_register_check("org.test.restart", &ct));
    CHECK_OK(notifyd_register_callback("org.test.restart", &cb, NULL, on_note, NULL, NULL));
    notifyd_register_options_t pat = {.flags = NOTIFYD_REG_PATTERN};
    CHECK_OK(notifyd_register_callback("org.test.*", &pt, NULL, on_note, (void *)1, &pat));
    CHECK_OK(notify_register_check("org.test.restart.state", &st));
    CHECK_OK(notify_set_state(st, 1234));
    CHECK_OK(notify_check(ct, &c));

    for (int round = 1; round <= 3; round++) {
        int sig = round == 2 ? SIGTERM : SIGKILL;
        h_kill_daemon(sig);
        CHECK(notify_post("org.test.down") == NOTIFY_STATUS_SERVER_NOT_FOUND, "round %d: no daemon", round);
        uint64_t v;
        CHECK(notify_get_state(st, &v) == NOTIFY_STATUS_SERVER_NOT_FOUND);
        CHECK(notify_is_valid_token(ft), "tokens stay valid while the daemon is away");
        h_restart_daemon();
        /* The barrier: reconnected, registrations re-sent, state restored. */
        CHECK_OK(notifyd_sync(TIMEOUT_MS));
        CHECK(h_status("subscriptions") == 3, "round %d: re-subscribed (two names and the pattern)", round);
        CHECK(h_sh("test \"$(\"$NOTIFYCTL\" --socket \"$SOCKET\" state get org.test.restart.state)\" = 1234") == 0,
              "round %d: the state value is restored", round);
        CHECK_OK(notify_get_state(st, &v));
        CHECK(v == 1234);
        /* A post from another process reaches every kind of registration. */
        CHECK(h_sh("\"$NOTIFYCTL\" --socket \"$SOCKET\" post org.test.restart >/dev/null") == 0);
        h_wait_readable(fd, TIMEOUT_MS, "the descriptor token after the restart");
        uint32_t t;
        CHECK(read(fd, &t, 4) == 4 && (int)ntohl(t) == ft);
        wait_calls(round, round);
        CHECK_OK(notify_check(ct, &c));
        CHECK(c == 1, "round %d: check token", round);
    }
    /* A value set after the restarts is the one restored next time. */
    CHECK_OK(notify_set_state(st, 99));
    h_kill_daemon(SIGKILL);
    h_restart_daemon();
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    uint64_t v;
    CHECK_OK(notify_get_state(st, &v));
    CHECK(v == 99, "got %llu", (unsigned long long)v);
    int toks[] = {ft, ct, cb, pt, st};
    for (int i = 0; i < 5; i++) CHECK_OK(notify_cancel(toks[i]));
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    CHECK(h_status("subscriptions") == 0);
    PASS();
}
