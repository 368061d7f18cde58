/* t_fork_callback: fork() inside a callback. In the child the library drops every registration (atfork)
 * while the callback is still running; when the callback returns, the library must not touch the token it
 * dropped (it did: a use-after-free that AddressSanitizer reports in the child). Twice: on a queue of the
 * program (the child returns from notifyd_queue_run and carries on) and on the library's callback thread
 * (the child's only thread: it goes on as the child's callback thread and runs the callbacks the child
 * registers). In both children the old token is invalid and new registrations work; the parent is
 * unaffected. No daemon: "self." names only. */
#define _GNU_SOURCE
#include "harness.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXPECT(cond, code) do { if (!(cond)) { fprintf(stderr, "child: %s failed\n", #cond); _exit(code); } } while (0)

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

static void noop(int token, const notifyd_notification_t *n, void *ctx) {}

/* 1. A queue of the program, run on the main thread. */
static pid_t child = -1;
static int forks;
static void fork_on_queue(int token, const notifyd_notification_t *n, void *ctx) {
    if (forks++ == 0) child = fork();
}

static void on_queue(void) {
    notifyd_queue_t *q = notifyd_queue_create();
    CHECK(q);
    int tok;
    CHECK_OK(notifyd_register_callback("self.fork.queue", &tok, q, fork_on_queue, NULL, NULL));
    CHECK_OK(notify_post("self.fork.queue"));
    h_wait_readable(notifyd_queue_fd(q), TIMEOUT_MS, "the callback");
    CHECK(notifyd_queue_run(q) == 1);
    CHECK(child >= 0, "fork: %s", strerror(errno));
    if (child == 0) {
        /* Back from the callback, in the child: the token is gone, the queue is the program's. */
        EXPECT(!notify_is_valid_token(tok), 2);
        int t2;
        EXPECT(notifyd_register_callback("self.fork.child", &t2, q, noop, NULL, NULL) == NOTIFY_STATUS_OK, 3);
        EXPECT(notify_post("self.fork.child") == NOTIFY_STATUS_OK, 4);
        struct pollfd p = {notifyd_queue_fd(q), POLLIN, 0};
        EXPECT(poll(&p, 1, TIMEOUT_MS) == 1, 5);
        EXPECT(notifyd_queue_run(q) == 1, 6);
        EXPECT(notify_cancel(t2) == NOTIFY_STATUS_OK, 7);
        /* No token uses the queue any more, the dropped one included. */
        EXPECT(notifyd_queue_destroy(q) == NOTIFY_STATUS_OK, 8);
        _exit(0);
    }
    CHECK(wait_child(child, "fork on a queue") == 0, "the child failed");
    /* The parent keeps its registration, and its callback runs again. */
    CHECK(notify_is_valid_token(tok));
    CHECK_OK(notify_post("self.fork.queue"));
    h_wait_readable(notifyd_queue_fd(q), TIMEOUT_MS, "the callback after the fork");
    CHECK(notifyd_queue_run(q) == 1);
    CHECK(forks == 2);
    CHECK_OK(notify_cancel(tok));
    CHECK_OK(notifyd_queue_destroy(q));
}

/* 2. The library's callback thread. The callback forks and, in the child, registers a callback of its own
 * before returning: the thread, the child's only one, goes on to run it. */
static int report[2]; /* the callback tells the main thread the child's pid */
static int old_token = -1;
static void child_callback(int token, const notifyd_notification_t *n, void *ctx) {
    EXPECT(!notify_is_valid_token(old_token), 12);
    EXPECT(notify_cancel(token) == NOTIFY_STATUS_OK, 13);
    _exit(0);
}
static void fork_on_thread(int token, const notifyd_notification_t *n, void *ctx) {
    pid_t pid = fork();
    if (pid == 0) {
        int t;
        EXPECT(notifyd_register_callback("self.fork.thread.child", &t, NULL, child_callback, NULL, NULL) == NOTIFY_STATUS_OK, 10);
        EXPECT(notify_post("self.fork.thread.child") == NOTIFY_STATUS_OK, 11);
        return; /* the callback runs when this one has returned */
    }
    if (write(report[1], &pid, sizeof pid) != (ssize_t)sizeof pid) {}
}

static void on_thread(void) {
    CHECK(pipe(report) == 0);
    CHECK_OK(notifyd_register_callback("self.fork.thread", &old_token, NULL, fork_on_thread, NULL, NULL));
    CHECK_OK(notify_post("self.fork.thread"));
    h_wait_readable(report[0], TIMEOUT_MS, "the callback's fork");
    pid_t pid;
    CHECK(read(report[0], &pid, sizeof pid) == (ssize_t)sizeof pid);
    CHECK(pid > 0, "fork failed");
    CHECK(wait_child(pid, "fork on the callback thread") == 0, "the child failed");
    CHECK(notify_is_valid_token(old_token));
    CHECK_OK(notify_cancel(old_token));
}

int main(void) {
    setenv("NOTIFYD_SOCKET", "/nonexistent/notifyd.sock", 1);
    signal(SIGPIPE, SIG_IGN);
    on_queue();
    on_thread();
    PASS();
}
