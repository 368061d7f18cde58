/* t_stall: a daemon that stops reading (a fake one here: it sends WELCOME and then reads nothing, as a
 * SIGSTOPped or hung notifyd would) freezes nothing but the calls that must reach it, and those only for a
 * bounded time. One thread posting without pause: its posts fill the socket and the library's buffer, then
 * one waits until the library gives up on the daemon (NOTIFYD_TIMEOUT_MS, 1 s here) and returns
 * NOTIFY_STATUS_SERVER_NOT_FOUND; the next call opens a new connection. Two threads posting while the main
 * thread keeps using the library (notify_post and notify_check of "self." names, notifyd_sync): every call
 * of the main thread returns. And notifyd_sync(200) to a daemon that never answers returns
 * NOTIFY_STATUS_SERVER_NOT_FOUND after its timeout, not the library's 30 s. Each case runs in a fresh child
 * process; the test's deadline (TIMEOUT_MS) on the child is what fails a hang. */
#define _GNU_SOURCE
#include "harness.h"
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static const uint8_t welcome[] = {0, 0, 0, 0x34, 0x81, 0, 1, 0, 0, 0x10, 0x92, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
    0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0, 0xff, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0x0d,
    'n', 'o', 't', 'i', 'f', 'y', 'd', ' ', '0', '.', '1', '.', '0'};

static char payload[60000];

/* In the child: exits with `code` (and says why) unless `cond`. */
#define EXPECT(cond, code) do { if (!(cond)) { fprintf(stderr, "child: %s failed (library: %s)\n", #cond, notifyd_last_error()); _exit(code); } } while (0)

/* Posts until a post fails; returns that status. */
static uint32_t post_until_failure(void) {
    for (;;) {
        uint32_t st = notifyd_post("org.test.stall", payload, sizeof payload, 0, NULL);
        if (st != NOTIFY_STATUS_OK) return st;
    }
}

static void one_poster(void) {
    EXPECT(post_until_failure() == NOTIFY_STATUS_SERVER_NOT_FOUND, 10);
    EXPECT(strstr(notifyd_last_error(), "read nothing") != NULL, 11);
    /* The library dropped that connection; the next call opens a new one. */
    EXPECT(notify_post("org.test.after") == NOTIFY_STATUS_OK, 12);
    _exit(0);
}

static atomic_int posters_done;
static uint32_t poster_status[2];
static void *poster(void *arg) {
    uint32_t *st = arg;
    *st = post_until_failure();
    atomic_fetch_add(&posters_done, 1);
    return NULL;
}

static void posters_and_main(void) {
    int fd, tok, check;
    EXPECT(notify_register_file_descriptor("self.stall", &fd, 0, &tok) == NOTIFY_STATUS_OK, 20);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) EXPECT(pthread_create(&th[i], NULL, poster, &poster_status[i]) == 0, 21);
    /* Until both posters have given up, the process goes on: self. posts are delivered, tokens checked,
     * and notifyd_sync returns after its timeout (the daemon never answers). */
    int rounds = 0;
    while (atomic_load(&posters_done) < 2 || rounds < 3) {
        EXPECT(notify_post("self.stall") == NOTIFY_STATUS_OK, 22);
        struct pollfd p = {fd, POLLIN, 0};
        EXPECT(poll(&p, 1, TIMEOUT_MS) == 1, 23);
        uint32_t v;
        EXPECT(read(fd, &v, sizeof v) == (ssize_t)sizeof v, 24);
        EXPECT(notify_check(tok, &check) == NOTIFY_STATUS_OK && check == 1, 25);
        EXPECT(notifyd_sync(50) == NOTIFY_STATUS_SERVER_NOT_FOUND, 26);
        rounds++;
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        EXPECT(poster_status[i] == NOTIFY_STATUS_SERVER_NOT_FOUND, 27);
    }
    _exit(0);
}

static void sync_timeout(void) {
    EXPECT(notify_post("org.test.connect") == NOTIFY_STATUS_OK, 30);
    EXPECT(notifyd_sync(200) == NOTIFY_STATUS_SERVER_NOT_FOUND, 31);
    EXPECT(strstr(notifyd_last_error(), "did not answer within 200 ms") != NULL, 32);
    EXPECT(notifyd_sync(0) == NOTIFY_STATUS_SERVER_NOT_FOUND, 33);
    _exit(0);
}

/* Serves a fake daemon that greets every connection and never reads, for a child running `client`;
 * returns how many connections it accepted. */
static int serve(const char *dir, const char *what, void (*client)(void)) {
    char path[400];
    snprintf(path, sizeof path, "%s/stall.sock", dir);
    unlink(path);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    CHECK(bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 16) == 0, "%s", strerror(errno));
    int exitpipe[2];
    CHECK(pipe(exitpipe) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(ls);
        close(exitpipe[0]);
        setenv("NOTIFYD_SOCKET", path, 1);
        client();
        _exit(99);
    }
    close(exitpipe[1]);
    int conns[256], n = 0;
    long end = h_now_ms() + TIMEOUT_MS;
    for (;;) {
        struct pollfd p[2] = {{ls, POLLIN, 0}, {exitpipe[0], POLLIN, 0}};
        long left = end - h_now_ms();
        int r = poll(p, 2, left > 0 ? (int)left : 0);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); FAIL("%s: the client hung", what); }
        if (p[0].revents & POLLIN) {
            int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
            CHECK(c >= 0 && n < 256);
            /* A write fails only if the client is gone already (it may exit with a connection still
             * waiting to be accepted). */
            if (write(c, welcome, sizeof welcome) != (ssize_t)sizeof welcome) CHECK(errno == EPIPE || errno == ECONNRESET, "%s", strerror(errno));
            conns[n++] = c; /* kept open, never read */
        }
        if (p[1].revents) break; /* the child exited */
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    for (int i = 0; i < n; i++) close(conns[i]);
    close(exitpipe[0]);
    close(ls);
    unlink(path);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the client failed (status 0x%x)", what, status);
    return n;
}

int main(void) {
    h_start_daemon(); /* for its temporary directory; the fake daemon lives next to it */
    char dir[256];
    snprintf(dir, sizeof dir, "%s", h_socket());
    *strrchr(dir, '/') = 0;
    memset(payload, 'x', sizeof payload);
    setenv("NOTIFYD_TIMEOUT_MS", "1000", 1);
    signal(SIGPIPE, SIG_IGN);

    CHECK(serve(dir, "one poster", one_poster) >= 2, "the library did not reconnect after giving up");
    serve(dir, "two posters and the main thread", posters_and_main);
    serve(dir, "notifyd_sync timeout", sync_timeout);
    PASS();
}
