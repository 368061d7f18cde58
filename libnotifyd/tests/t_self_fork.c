/* t_self_fork: "self." names stay in the process (the daemon never hears of them); a forked child starts
 * with no registrations and can post; signals, with notify_check telling which name fired; and with no
 * daemon, calls fail with NOTIFY_STATUS_SERVER_NOT_FOUND instead of hanging; across exec only the read end
 * of a descriptor token survives. */
#define _GNU_SOURCE
#include "harness.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int sigpipe_fds[2];
static void on_signal(int sig) {
    int saved = errno;
    char c = (char)sig;
    if (write(sigpipe_fds[1], &c, 1) < 0) {}
    errno = saved;
}

static int wait_child(pid_t pid, const char *what) {
    long end = h_now_ms() + TIMEOUT_MS;
    int status;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (h_now_ms() > end) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); FAIL("%s: the child hung", what); }
        usleep(2000); /* polling a child's exit; the deadline above is what fails */
    }
    if (!WIFEXITED(status)) FAIL("%s: child killed by signal %d", what, WTERMSIG(status));
    return WEXITSTATUS(status);
}

/* Descriptors without close-on-exec that the process had before the library made any. */
static char inherited[1024];

int main(void) {
    for (int fd = 0; fd < (int)sizeof inherited; fd++) {
        int flags = fcntl(fd, F_GETFD);
        inherited[fd] = flags >= 0 && !(flags & FD_CLOEXEC);
    }
    /* No daemon yet: prompt failure, not a hang (the child's deadline is the test). */
    pid_t pid = fork();
    if (pid == 0) {
        setenv("NOTIFYD_SOCKET", "/nonexistent/notifyd.sock", 1);
        int t;
        if (notify_post("org.test.nodaemon") != NOTIFY_STATUS_SERVER_NOT_FOUND) _exit(1);
        if (notify_register_check("org.test.nodaemon", &t) != NOTIFY_STATUS_SERVER_NOT_FOUND) _exit(2);
        if (notifyd_sync(0) != NOTIFY_STATUS_SERVER_NOT_FOUND) _exit(3);
        /* "self." names need no daemon. */
        if (notify_register_check("self.nodaemon", &t) != NOTIFY_STATUS_OK) _exit(4);
        if (notify_post("self.nodaemon") != NOTIFY_STATUS_OK) _exit(5);
        _exit(0);
    }
    CHECK(wait_child(pid, "no daemon") == 0, "no-daemon child");

    /* The socket path when NOTIFYD_SOCKET is empty: /run/notifyd for root, else $XDG_RUNTIME_DIR/notifyd,
     * else /tmp/notifyd-UID (PROTOCOL.md 1); the failure names the path it tried. */
    const char *xdg_cases[] = {"/nonexistent-libnotifyd-test", NULL};
    for (int k = 0; k < 2; k++) {
        char want[128];
        if (getuid() == 0) snprintf(want, sizeof want, "/run/notifyd/notifyd.sock");
        else if (xdg_cases[k]) snprintf(want, sizeof want, "%s/notifyd/notifyd.sock", xdg_cases[k]);
        else snprintf(want, sizeof want, "/tmp/notifyd-%u/notifyd.sock", (unsigned)getuid());
        if (access(want, F_OK) == 0) continue; /* a real daemon lives there: leave it alone */
        pid = fork();
        if (pid == 0) {
            setenv("NOTIFYD_SOCKET", "", 1);
            if (xdg_cases[k]) setenv("XDG_RUNTIME_DIR", xdg_cases[k], 1); else unsetenv("XDG_RUNTIME_DIR");
            if (notify_post("org.test.path") != NOTIFY_STATUS_SERVER_NOT_FOUND) _exit(1);
            if (!strstr(notifyd_last_error(), want)) { fprintf(stderr, "%s: %s\n", want, notifyd_last_error()); _exit(2); }
            _exit(0);
        }
        CHECK(wait_child(pid, "socket path") == 0, "the library looked for %s", want);
    }

    h_start_daemon();
    int efd = notifyd_connection_fd();
    uint64_t posts_before = h_status("posts");

    /* self. names: delivered inside the process, never sent. */
    int st, c;
    CHECK_OK(notify_register_check("self.local.event", &st));
    CHECK_OK(notify_check(st, &c));
    CHECK(c == 1);
    CHECK_OK(notify_post("self.local.event"));
    CHECK_OK(notify_check(st, &c));
    CHECK(c == 1, "a self. post is delivered at once, in the calling thread");
    CHECK_OK(notify_check(st, &c));
    CHECK(c == 0);
    uint64_t v = 1;
    CHECK_OK(notify_get_state(st, &v));
    CHECK(v == 0);
    CHECK_OK(notify_set_state(st, 77));
    CHECK_OK(notify_get_state(st, &v));
    CHECK(v == 77);
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    CHECK(h_status("posts") == posts_before, "the daemon saw no post");
    CHECK(h_status("subscriptions") == 0, "the daemon saw no subscription");
    CHECK(h_status("state_names") == 0, "the daemon saw no state");

    /* Signals: two names on one signal; notify_check tells which one fired. */
    CHECK(pipe2(sigpipe_fds, O_CLOEXEC) == 0);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGUSR1, &sa, NULL);
    int s1, s2;
    CHECK_OK(notify_register_signal("org.test.sig.one", SIGUSR1, &s1));
    CHECK_OK(notify_register_signal("org.test.sig.two", SIGUSR1, &s2));
    CHECK_OK(notify_check(s1, &c)); /* the first check is always true */
    CHECK_OK(notify_check(s2, &c));
    CHECK_OK(notify_post("org.test.sig.two"));
    h_wait_readable(sigpipe_fds[0], TIMEOUT_MS, "SIGUSR1");
    char sig;
    CHECK(read(sigpipe_fds[0], &sig, 1) == 1 && sig == SIGUSR1);
    CHECK_OK(notify_check(s1, &c));
    CHECK(c == 0, "org.test.sig.one did not fire");
    CHECK_OK(notify_check(s2, &c));
    CHECK(c == 1, "org.test.sig.two fired");

    /* fork: the child has none of the parent's registrations, and can post and register. */
    int parent_token;
    CHECK_OK(notify_register_check("org.test.fork", &parent_token));
    CHECK_OK(notify_check(parent_token, &c));
    int pfd = -1, pfd_token;
    CHECK_OK(notify_register_file_descriptor("org.test.fork.fd", &pfd, 0, &pfd_token));
    pid = fork();
    if (pid == 0) {
        if (notify_is_valid_token(parent_token)) _exit(10);
        /* The read end stays open (it is the program's), but the child's library no longer knows it. */
        if (fcntl(pfd, F_GETFD) == -1) _exit(14);
        int again = pfd, t2;
        if (notify_register_file_descriptor("org.test.fork.fd", &again, NOTIFY_REUSE, &t2) != NOTIFY_STATUS_INVALID_FILE) _exit(15);
        int ct;
        if (notify_register_check("org.test.fork.child", &ct) != NOTIFY_STATUS_OK) _exit(11);
        if (notify_post("org.test.fork") != NOTIFY_STATUS_OK) _exit(12);
        if (notifyd_sync(TIMEOUT_MS) != NOTIFY_STATUS_OK) _exit(13); /* the post is fanned out */
        _exit(0);
    }
    CHECK(wait_child(pid, "fork") == 0, "the forked child failed");
    CHECK(fcntl(pfd, F_GETFD) != -1, "the parent's descriptor is untouched");
    CHECK_OK(notify_cancel(pfd_token));
    for (;;) {
        h_wait_readable(efd, TIMEOUT_MS, "the child's post");
        uint64_t n;
        if (read(efd, &n, sizeof n) < 0) {}
        CHECK_OK(notify_check(parent_token, &c));
        if (c) break; /* other deliveries (signals above) may have woken us first */
    }
    /* exec: only the read end of a descriptor token survives (it is the program's); the connection,
     * the write ends and the eventfds are close-on-exec. */
    int fdtok, nfd = -1;
    CHECK_OK(notify_register_file_descriptor("org.test.exec", &nfd, 0, &fdtok));
    notifyd_queue_t *q = notifyd_queue_create();
    CHECK(notifyd_queue_fd(q) >= 0 && notifyd_connection_fd() >= 0);
    for (int fd = 0; fd < 1024; fd++) {
        int flags = fcntl(fd, F_GETFD);
        if (flags < 0 || (flags & FD_CLOEXEC) || inherited[fd]) continue;
        CHECK(fd == nfd, "descriptor %d would survive exec", fd);
    }
    CHECK(!(fcntl(nfd, F_GETFD) & FD_CLOEXEC), "the read end is the program's, as on Darwin");
    CHECK_OK(notify_cancel(fdtok));
    CHECK_OK(notifyd_queue_destroy(q));

    /* The parent's connection survived the child's exit. */
    CHECK_OK(notify_post("org.test.fork"));
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    CHECK(notify_is_valid_token(parent_token));
    PASS();
}
