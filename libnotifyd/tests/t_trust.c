/* t_trust: the library talks only to a daemon of its own user or root (SO_PEERCRED), or of the user named
 * by NOTIFYD_DAEMON_UID (a uid, or "any"), as the Swift library does; otherwise every call fails with
 * NOTIFY_STATUS_SERVER_NOT_FOUND and notifyd_last_error says why. Runs the daemon as "nobody", so it
 * needs root (CI runs as root); as another user it says so and checks only that its own daemon is
 * trusted. */
#define _GNU_SOURCE
#include "harness.h"
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Each case in a fresh child: the library decides once per connection. */
static int child(const char *env_uid) {
    pid_t pid = fork();
    if (pid == 0) {
        if (env_uid) setenv("NOTIFYD_DAEMON_UID", env_uid, 1); else unsetenv("NOTIFYD_DAEMON_UID");
        int t;
        uint32_t st = notify_register_check("org.test.trust", &t);
        if (st == NOTIFY_STATUS_OK) _exit(0);
        if (st == NOTIFY_STATUS_SERVER_NOT_FOUND && strstr(notifyd_last_error(), "refusing the daemon")) _exit(1);
        fprintf(stderr, "status %u: %s\n", st, notifyd_last_error());
        _exit(2);
    }
    int status;
    long end = h_now_ms() + TIMEOUT_MS;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (h_now_ms() > end) { kill(pid, 9); FAIL("the child hung"); }
        usleep(2000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

int main(void) {
    if (getuid() != 0) {
        h_start_daemon();
        CHECK(child(NULL) == 0, "our own user's daemon is trusted");
        printf("not root: the other-user cases need root and were not run\n");
        PASS();
    }
    const uid_t nobody = 65534;
    h_start_daemon_as(nobody);
    CHECK(child(NULL) == 1, "a daemon of uid %u is refused by default", (unsigned)nobody);
    CHECK(child("1234") == 1, "NOTIFYD_DAEMON_UID names another user");
    CHECK(child("65534x") == 1, "not a number");
    CHECK(child("65534") == 0, "NOTIFYD_DAEMON_UID=65534 trusts it");
    CHECK(child("any") == 0, "NOTIFYD_DAEMON_UID=any trusts every daemon");
    PASS();
}
