/* t_protocol: the library against a fake daemon (a socket this test serves) that breaks the protocol: a
 * zero-length frame, a malformed WELCOME, a closing ERROR (the connections quota), a client-to-daemon
 * type. Each time the pending call fails with NOTIFY_STATUS_SERVER_NOT_FOUND and notifyd_last_error says
 * why; nothing hangs or crashes. Each case runs in a fresh child process (fresh library state). */
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
    PASS();
}
