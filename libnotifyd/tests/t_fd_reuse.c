/* t_fd_reuse: 50,000 NOTIFY_REUSE registrations on one descriptor (over 100 names): a post writes each of
 * its tokens once, in network byte order; the descriptor stays open until its last token is cancelled
 * and is closed then. */
#define _GNU_SOURCE
#include "harness.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define N 50000
#define NAMES 100
static int tokens[N];
static unsigned char seen[N];

/* Reads the N / NAMES tokens of name `k` from the descriptor; each exactly once, nothing else. */
static void expect_name(int fd, int k) {
    memset(seen, 0, sizeof seen);
    for (int got = 0; got < N / NAMES; got++) {
        uint32_t v;
        h_wait_readable(fd, TIMEOUT_MS, "tokens on the descriptor");
        CHECK(read(fd, &v, 4) == 4);
        int t = (int)ntohl(v);
        int i = t - tokens[0]; /* tokens are handed out in order */
        CHECK(i >= 0 && i < N && tokens[i] == t, "unknown token %d", t);
        CHECK(i % NAMES == k, "token %d belongs to name %d, not %d", t, i % NAMES, k);
        CHECK(!seen[i], "token %d written twice", t);
        seen[i] = 1;
    }
}

int main(void) {
    h_start_daemon();
    int fd = -1;
    char name[64];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "org.test.fdreuse.%d", i % NAMES);
        CHECK_OK(notify_register_file_descriptor(name, &fd, i ? NOTIFY_REUSE : 0, &tokens[i]));
        if (i) CHECK(tokens[i] == tokens[i - 1] + 1);
    }
    CHECK(h_status("subscriptions") == NAMES);
    CHECK_OK(notify_post("org.test.fdreuse.7"));
    CHECK_OK(notify_post("org.test.fdreuse.42"));
    expect_name(fd, 7);
    expect_name(fd, 42);
    CHECK(!h_readable(fd), "nothing more on the descriptor");

    for (int i = 0; i < N - 1; i++) CHECK_OK(notify_cancel(tokens[i]));
    CHECK(fcntl(fd, F_GETFD) != -1, "the descriptor stays open while a token uses it");
    snprintf(name, sizeof name, "org.test.fdreuse.%d", (N - 1) % NAMES);
    CHECK_OK(notify_post(name));
    h_wait_readable(fd, TIMEOUT_MS, "the last token");
    uint32_t v;
    CHECK(read(fd, &v, 4) == 4 && (int)ntohl(v) == tokens[N - 1]);
    CHECK_OK(notify_cancel(tokens[N - 1]));
    errno = 0;
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "the descriptor is closed with its last token");
    int again = fd;
    CHECK(notify_register_file_descriptor("org.test.fdreuse.0", &again, NOTIFY_REUSE, &tokens[0]) == NOTIFY_STATUS_INVALID_FILE,
          "a closed descriptor cannot be reused");
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    CHECK(h_status("subscriptions") == 0);
    PASS();
}
