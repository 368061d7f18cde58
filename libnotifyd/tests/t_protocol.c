/* t_protocol: the library against a fake daemon (a socket this test serves) that breaks the protocol: a
 * zero-length frame, a malformed WELCOME, a closing ERROR (the connections quota), a client-to-daemon
 * type. Each time the pending call fails with NOTIFY_STATUS_SERVER_NOT_FOUND and notifyd_last_error says
 * why; nothing hangs or crashes. And OVERFLOW marks the tokens concerned for notify_check. Each case runs in
 * a fresh child process (fresh library state). */
#define _GNU_SOURCE
#include "harness.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static const uint8_t welcome[] = {0, 0, 0, 0x34, 0x81, 0, 1, 0, 0, 0x10, 0x92, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
    0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0, 0xff, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0x0d,
    'n', 'o', 't', 'i', 'f', 'y', 'd', ' ', '0', '.', '1', '.', '0'};

struct fake_case { const char *what; const uint8_t *bytes; size_t len; const char *expect; };

static void run_case(const char *dir, const struct fake_case *c) {
    char path[400];
    snprintf(path, sizeof path, "%s/fake.sock", dir);
    unlink(path);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    CHECK(bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 4) == 0, "%s", strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        close(ls);
        setenv("NOTIFYD_SOCKET", path, 1);
        int t;
        uint32_t st = notify_register_check("org.test.protocol", &t);
        if (st != NOTIFY_STATUS_SERVER_NOT_FOUND) { fprintf(stderr, "%s: status %u\n", c->what, st); _exit(1); }
        if (!strstr(notifyd_last_error(), c->expect)) { fprintf(stderr, "%s: error '%s'\n", c->what, notifyd_last_error()); _exit(2); }
        _exit(0);
    }
    int fd = accept(ls, NULL, NULL);
    CHECK(fd >= 0);
    CHECK(write(fd, c->bytes, c->len) == (ssize_t)c->len);
    /* Read what the client sends until it closes: it must give up on its own. */
    char buf[4096];
    struct timeval tv = {TIMEOUT_MS / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r == 0) break;
        if (r < 0) FAIL("%s: the client did not close the connection (%s)", c->what, strerror(errno));
    }
    close(fd);
    close(ls);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "case %s failed (status %d)", c->what, status);
}

/* Reads one frame from the client into buf; returns its type (-1 when the client closed), and its request
 * id in *req. */
static int read_frame(int fd, uint8_t *buf, size_t cap, uint32_t *req) {
    uint8_t len[4];
    size_t got = 0;
    while (got < 4) { ssize_t r = read(fd, len + got, 4 - got); if (r <= 0) return -1; got += (size_t)r; }
    uint32_t n = (uint32_t)len[0] << 24 | (uint32_t)len[1] << 16 | (uint32_t)len[2] << 8 | len[3];
    CHECK(n >= 1 && n <= cap);
    for (got = 0; got < n;) { ssize_t r = read(fd, buf + got, n - got); if (r <= 0) FAIL("fake daemon: read"); got += (size_t)r; }
    *req = n >= 5 ? (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 | buf[4] : 0;
    return buf[0];
}

/* OVERFLOW makes notify_check report true for the tokens of the subscription it names (or all, for 0),
 * since their notifications may have been dropped. The fake daemon sends it just before a PONG, so the
 * client knows it has been handled when notifyd_sync returns. */
static void overflow_case(const char *dir) {
    char path[400];
    snprintf(path, sizeof path, "%s/fake-overflow.sock", dir);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    CHECK(bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 4) == 0, "%s", strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        close(ls);
        setenv("NOTIFYD_SOCKET", path, 1);
        int t1, t2, c;
        if (notify_register_check("org.test.one", &t1) != NOTIFY_STATUS_OK) _exit(1);
        if (notify_register_check("org.test.two", &t2) != NOTIFY_STATUS_OK) _exit(2);
        notify_check(t1, &c);
        notify_check(t2, &c);
        if (notifyd_sync(TIMEOUT_MS) != NOTIFY_STATUS_OK) _exit(3); /* OVERFLOW for subscription 2 */
        if (notify_check(t1, &c) != NOTIFY_STATUS_OK || c != 0) _exit(4);
        if (notify_check(t2, &c) != NOTIFY_STATUS_OK || c != 1) _exit(5);
        if (notifyd_sync(TIMEOUT_MS) != NOTIFY_STATUS_OK) _exit(6); /* OVERFLOW for the whole connection */
        if (notify_check(t1, &c) != NOTIFY_STATUS_OK || c != 1) _exit(7);
        if (notify_check(t2, &c) != NOTIFY_STATUS_OK || c != 1) _exit(8);
        _exit(0);
    }
    int fd = accept(ls, NULL, NULL);
    CHECK(fd >= 0);
    uint8_t buf[1024];
    uint32_t req, sub_ids[2] = {0, 0};
    CHECK(write(fd, welcome, sizeof welcome) == (ssize_t)sizeof welcome);
    int subs = 0, pings = 0;
    while (pings < 2) {
        int type = read_frame(fd, buf, sizeof buf, &req);
        if (type < 0) break; /* the client gave up: its exit status says where */
        if (type == 0x01) continue; /* HELLO */
        if (type == 0x02) { /* SUBSCRIBE: note its subscription id, answer OK */
            CHECK(subs < 2);
            sub_ids[subs++] = (uint32_t)buf[5] << 24 | (uint32_t)buf[6] << 16 | (uint32_t)buf[7] << 8 | buf[8];
            uint8_t ok[] = {0, 0, 0, 5, 0x82, (uint8_t)(req >> 24), (uint8_t)(req >> 16), (uint8_t)(req >> 8), (uint8_t)req};
            CHECK(write(fd, ok, sizeof ok) == (ssize_t)sizeof ok);
        } else if (type == 0x05) { /* PING: OVERFLOW first, then PONG */
            uint32_t id = pings == 0 ? sub_ids[1] : 0;
            uint8_t ov[] = {0, 0, 0, 13, 0x86, (uint8_t)(id >> 24), (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id,
                            0, 0, 0, 0, 0, 0, 0, 3};
            uint8_t pong[] = {0, 0, 0, 5, 0x84, (uint8_t)(req >> 24), (uint8_t)(req >> 16), (uint8_t)(req >> 8), (uint8_t)req};
            CHECK(write(fd, ov, sizeof ov) == (ssize_t)sizeof ov && write(fd, pong, sizeof pong) == (ssize_t)sizeof pong);
            pings++;
        } else {
            FAIL("fake daemon: unexpected frame type 0x%02x", type);
        }
    }
    int status;
    long end = h_now_ms() + TIMEOUT_MS;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (h_now_ms() > end) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); FAIL("the overflow client hung"); }
        usleep(2000);
    }
    close(fd);
    close(ls);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "overflow case failed (status %d)", status);
}

int main(void) {
    h_start_daemon(); /* for its temporary directory; the fake daemon lives next to it */
    char dir[256];
    snprintf(dir, sizeof dir, "%s", h_socket());
    *strrchr(dir, '/') = 0;

    static uint8_t zero[] = {0, 0, 0, 0};
    static uint8_t bad_welcome[sizeof welcome];
    memcpy(bad_welcome, welcome, sizeof welcome);
    bad_welcome[3] = 0x33; /* one byte short: the server name runs past the frame */
    static uint8_t closing[sizeof welcome + 128];
    memcpy(closing, welcome, sizeof welcome);
    const char msg[] = "uid 1000 already has the maximum of 256 connections";
    uint8_t err[] = {0, 0, 0, (uint8_t)(10 + sizeof msg - 1), 0x8f, 0, 0, 0, 0, 0, 15, 1, 0, (uint8_t)(sizeof msg - 1)};
    memcpy(closing + sizeof welcome, err, sizeof err);
    memcpy(closing + sizeof welcome + sizeof err, msg, sizeof msg - 1);
    static uint8_t client_type[sizeof welcome + 9];
    memcpy(client_type, welcome, sizeof welcome);
    const uint8_t ping[] = {0, 0, 0, 5, 0x05, 0, 0, 0, 1};
    memcpy(client_type + sizeof welcome, ping, sizeof ping);
    static uint8_t huge[] = {0x7f, 0xff, 0xff, 0xff, 0x81};

    const struct fake_case cases[] = {
        {"zero length", zero, sizeof zero, "frame length 0"},
        {"huge length", huge, sizeof huge, "frame length"},
        {"malformed WELCOME", bad_welcome, sizeof bad_welcome, "malformed frame"},
        {"closing ERROR", closing, sizeof welcome + sizeof err + sizeof msg - 1, "maximum of 256 connections"},
        {"client-to-daemon type", client_type, sizeof client_type, "malformed frame of type 0x05"},
    };
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(dir, &cases[i]);
    overflow_case(dir);
    PASS();
}
