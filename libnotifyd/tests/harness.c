/* harness.c - see harness.h. */
#define _GNU_SOURCE
#include "harness.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t daemon_pid = -1, owner_pid = -1;
static uid_t daemon_uid = (uid_t)-1; /* run the daemon as this user (root only), or as ourselves */
static char dir[200], sock[240], conf[240], logpath[240];

long h_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static const char *bin(const char *env, const char *def) {
    const char *v = getenv(env);
    return v && *v ? v : def;
}
static char daemon_copy[300]; /* set when the daemon runs from a copy another user can execute */
static const char *notifyd_bin(void) { return daemon_copy[0] ? daemon_copy : bin("NOTIFYD", "../.build/debug/notifyd"); }
const char *h_notifyctl(void) { return bin("NOTIFYCTL", "../.build/debug/notifyctl"); }
const char *h_socket(void) { return sock; }

static void cleanup(void) {
    if (getpid() != owner_pid) return; /* forked children leave the daemon alone */
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        for (long end = h_now_ms() + 10000; h_now_ms() < end;) {
            if (waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid) { daemon_pid = -1; break; }
            usleep(10000);
        }
        if (daemon_pid > 0) { kill(daemon_pid, SIGKILL); waitpid(daemon_pid, NULL, 0); }
        daemon_pid = -1;
    }
    if (dir[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
        dir[0] = 0;
    }
}

void h_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (library: %s)\n", notifyd_last_error());
    va_end(ap);
    if (logpath[0] && getpid() == owner_pid) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "tail -n 20 '%s' >&2", logpath);
        if (system(cmd) != 0) {}
    }
    cleanup();
    _exit(1);
}

static int can_connect(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(sock) >= sizeof a.sun_path) FAIL("socket path too long: %s", sock);
    memcpy(a.sun_path, sock, strlen(sock) + 1);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static void spawn(void) {
    if (access(notifyd_bin(), X_OK) != 0)
        FAIL("cannot run the daemon %s (%s): build it (swift build) or set NOTIFYD and NOTIFYCTL", notifyd_bin(), strerror(errno));
    pid_t pid = fork();
    if (pid < 0) FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        if (daemon_uid != (uid_t)-1 && (setgid((gid_t)daemon_uid) != 0 || setuid(daemon_uid) != 0)) _exit(126);
        FILE *f = freopen(logpath, "a", stderr);
        (void)f;
        execl(notifyd_bin(), "notifyd", "--socket", sock, "--config", conf, "--log", "stderr", "--log-level", getenv("NOTIFYD_LOG_LEVEL") ? getenv("NOTIFYD_LOG_LEVEL") : "warning", (char *)NULL);
        fprintf(stderr, "cannot run %s: %s\n", notifyd_bin(), strerror(errno));
        _exit(127);
    }
    daemon_pid = pid;
    /* Ready when it accepts connections (a test connection is harmless). */
    long end = h_now_ms() + TIMEOUT_MS;
    while (!can_connect()) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) { daemon_pid = -1; FAIL("the daemon %s exited at start (status %d)", notifyd_bin(), status); }
        if (h_now_ms() > end) FAIL("the daemon did not listen on %s within %d ms", sock, TIMEOUT_MS);
        usleep(5000);
    }
}

static void h_start_daemon_dir_only(void);
void h_start_daemon(void) {
    h_start_daemon_dir_only();
    spawn();
}

static void h_start_daemon_dir_only(void) {
    owner_pid = getpid();
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/libnotifyd-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) FAIL("mkdtemp: %s", strerror(errno));
    snprintf(sock, sizeof sock, "%s/notifyd.sock", dir);
    snprintf(conf, sizeof conf, "%s/notifyd.conf", dir);
    snprintf(logpath, sizeof logpath, "%s/notifyd.log", dir);
    FILE *c = fopen(conf, "w");
    if (!c) FAIL("cannot write %s", conf);
    fclose(c);
    setenv("NOTIFYD_SOCKET", sock, 1);
    atexit(cleanup);
    signal(SIGPIPE, SIG_IGN);
}

void h_restart_daemon(void) { spawn(); }

void h_start_daemon_as(uid_t uid) {
    daemon_uid = uid;
    h_start_daemon_dir_only();
    /* The daemon binds only in a directory of its own user (or root's, unwritable by others). */
    if (chown(dir, uid, (gid_t)uid) != 0 || chown(conf, uid, (gid_t)uid) != 0) FAIL("chown: %s", strerror(errno));
    /* The build may sit where that user cannot reach it (a checkout under /root): run a copy. */
    char copy[300];
    snprintf(copy, sizeof copy, "%s/notifyd", dir);
    if (h_sh("cp '%s' '%s' && chmod 755 '%s'", notifyd_bin(), copy, copy) != 0) FAIL("cannot copy %s", notifyd_bin());
    snprintf(daemon_copy, sizeof daemon_copy, "%s", copy);
    spawn();
}

void h_kill_daemon(int sig) {
    if (daemon_pid <= 0) FAIL("no daemon to kill");
    kill(daemon_pid, sig);
    long end = h_now_ms() + TIMEOUT_MS;
    while (waitpid(daemon_pid, NULL, WNOHANG) != daemon_pid) {
        if (h_now_ms() > end) FAIL("the daemon did not exit on signal %d", sig);
        usleep(5000);
    }
    daemon_pid = -1;
}

int h_sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    setenv("NOTIFYCTL", h_notifyctl(), 1);
    setenv("SOCKET", sock, 1);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

uint64_t h_status(const char *key) {
    char *json = NULL;
    CHECK_OK(notifyd_query(1, "", &json));
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    char *p = strstr(json, pat);
    if (!p) FAIL("no %s in %s", key, json);
    uint64_t v = strtoull(p + strlen(pat), NULL, 10);
    free(json);
    return v;
}

int h_readable(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

void h_wait_readable(int fd, int timeout_ms, const char *what) {
    struct pollfd p = {fd, POLLIN, 0};
    long end = h_now_ms() + timeout_ms;
    for (;;) {
        long left = end - h_now_ms();
        if (left < 0) left = 0;
        int r = poll(&p, 1, (int)left);
        if (r == 1) return;
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) FAIL("timed out after %d ms waiting for %s", timeout_ms, what);
        FAIL("poll: %s", strerror(errno));
    }
}
