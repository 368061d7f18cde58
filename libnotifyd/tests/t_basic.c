/* t_basic: the everyday contract of notify(3) against a real daemon: check tokens (true on the first call
 * and once after each post), validity, state (0 by default, read by another process), the status codes
 * for bad names, foreign descriptors, Mach ports and other users' names. */
#define _GNU_SOURCE
#include "harness.h"
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Waits until the library has delivered `count` more notifications to this process. */
static void wait_deliveries(int efd, const char *what) {
    h_wait_readable(efd, TIMEOUT_MS, what);
    uint64_t v;
    if (read(efd, &v, sizeof v) != sizeof v) FAIL("read eventfd");
}

int main(void) {
    h_start_daemon();
    int efd = notifyd_connection_fd();
    CHECK(efd >= 0);

    int t, c;
    CHECK_OK(notify_register_check("org.test.basic", &t));
    CHECK(t >= 0);
    CHECK(notify_is_valid_token(t));
    CHECK(!notify_is_valid_token(-1));
    CHECK(!notify_is_valid_token(t + 1000));
    CHECK_OK(notify_check(t, &c));
    CHECK(c == 1, "the first check of a token is true");
    CHECK_OK(notify_check(t, &c));
    CHECK(c == 0, "no post since the last check");

    for (int i = 0; i < 3; i++) {
        CHECK_OK(notify_post("org.test.basic"));
        wait_deliveries(efd, "a notification of org.test.basic");
        CHECK_OK(notify_check(t, &c));
        CHECK(c == 1, "true after a post");
        CHECK_OK(notify_check(t, &c));
        CHECK(c == 0, "true only once per post");
    }

    /* A post from another process (notifyctl) reaches the token too. */
    CHECK(h_sh("\"$NOTIFYCTL\" --socket \"$SOCKET\" post org.test.basic >/dev/null") == 0);
    wait_deliveries(efd, "notifyctl's post");
    CHECK_OK(notify_check(t, &c));
    CHECK(c == 1);

    /* State: 0 by default, set here, read by another process, and by this one. */
    int s;
    uint64_t v = 99;
    CHECK_OK(notify_register_check("org.test.state", &s));
    CHECK_OK(notify_get_state(s, &v));
    CHECK(v == 0, "state defaults to 0, got %llu", (unsigned long long)v);
    CHECK_OK(notify_set_state(s, 0x1234567890ABCDEFull));
    CHECK_OK(notify_get_state(s, &v));
    CHECK(v == 0x1234567890ABCDEFull);
    CHECK(h_sh("test \"$(\"$NOTIFYCTL\" --socket \"$SOCKET\" state get org.test.state)\" = %llu",
               0x1234567890ABCDEFull) == 0, "notifyctl reads the state this process set");
    CHECK(h_sh("\"$NOTIFYCTL\" --socket \"$SOCKET\" state set org.test.state 7") == 0);
    CHECK_OK(notify_get_state(s, &v));
    CHECK(v == 7, "another process's value, got %llu", (unsigned long long)v);
    CHECK(notify_get_state(s, NULL) == NOTIFY_STATUS_NULL_INPUT);

    /* Names notifyd refuses. */
    int bad;
    CHECK(notify_post(NULL) == NOTIFY_STATUS_INVALID_NAME);
    CHECK(notify_post("") == NOTIFY_STATUS_INVALID_NAME);
    CHECK(notify_post("org..x") == NOTIFY_STATUS_INVALID_NAME);
    CHECK(notify_post("org.x y") == NOTIFY_STATUS_INVALID_NAME);
    CHECK(notify_post("org.*") == NOTIFY_STATUS_INVALID_NAME);
    CHECK(notify_post("a\xc2\xa0z") == NOTIFY_STATUS_INVALID_NAME, "no-break space");
    CHECK(notify_post("bad\xff") == NOTIFY_STATUS_INVALID_NAME, "not UTF-8");
    char longname[300];
    memset(longname, 'a', 256);
    longname[256] = 0;
    CHECK(notify_register_check(longname, &bad) == NOTIFY_STATUS_INVALID_NAME);
    longname[255] = 0;
    CHECK_OK(notify_register_check(longname, &bad));
    CHECK_OK(notify_cancel(bad));
    CHECK(notify_register_check("org.", &bad) == NOTIFY_STATUS_INVALID_NAME);
    CHECK(notify_register_check(NULL, &bad) == NOTIFY_STATUS_INVALID_NAME);
    CHECK_OK(notify_post("de.beispiel.gr\xc3\xb6\xc3\x9f" "e"));

    /* Another user's names. */
    char other[64];
    snprintf(other, sizeof other, "user.%u.inbox", (unsigned)getuid() + 1);
    /* Root may post every name (PROTOCOL.md 8.2). */
    CHECK(notify_post(other) == (getuid() == 0 ? NOTIFY_STATUS_OK : NOTIFY_STATUS_NOT_AUTHORIZED));
    snprintf(other, sizeof other, "user.%u.inbox", (unsigned)getuid());
    uint32_t delivered = 99;
    CHECK_OK(notifyd_post(other, "x", 1, NOTIFYD_POST_ACK, &delivered));
    CHECK(delivered == 0);

    /* Descriptors the library did not make, and Mach ports. */
    int p[2];
    CHECK(pipe(p) == 0);
    int fd = p[0];
    CHECK(notify_register_file_descriptor("org.test.fd", &fd, NOTIFY_REUSE, &bad) == NOTIFY_STATUS_INVALID_FILE);
    CHECK(notify_register_file_descriptor("org.test.fd", NULL, 0, &bad) == NOTIFY_STATUS_INVALID_FILE);
    close(p[0]);
    close(p[1]);
    mach_port_t port = 0;
    CHECK(notify_register_mach_port("org.test.port", &port, 0, &bad) == NOTIFY_STATUS_INVALID_PORT);
    CHECK(notify_register_signal("org.test.sig", 0, &bad) == NOTIFY_STATUS_INVALID_SIGNAL);

    /* Cancelled tokens are invalid everywhere. */
    CHECK_OK(notify_cancel(t));
    CHECK(!notify_is_valid_token(t));
    CHECK(notify_check(t, &c) == NOTIFY_STATUS_INVALID_TOKEN);
    CHECK(notify_cancel(t) == NOTIFY_STATUS_INVALID_TOKEN);
    CHECK(notify_suspend(t) == NOTIFY_STATUS_INVALID_TOKEN);
    CHECK(notify_resume(t) == NOTIFY_STATUS_INVALID_TOKEN);
    CHECK(notify_set_state(t, 1) == NOTIFY_STATUS_INVALID_TOKEN);
    CHECK_OK(notify_cancel(s));
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    CHECK(h_status("subscriptions") == 0, "every subscription is gone after the last cancel");
    PASS();
}
