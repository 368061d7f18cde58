/* harness.h - what every test needs: its own daemon on a private socket in a temp directory (binaries from
 * $NOTIFYD and $NOTIFYCTL, default ../.build/debug/), waits that fail loudly after a timeout, and the
 * daemon's figures. Tests wait on events (descriptors, condition variables, replies), never on sleeps. */
#ifndef HARNESS_H
#define HARNESS_H
#include <notify.h>
#include <notifyd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#define TIMEOUT_MS 20000 /* generous: valgrind is slow */

void h_fail(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
#define FAIL(...) h_fail(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "check failed: %s\n", #cond); FAIL(" " __VA_ARGS__); } } while (0)
#define CHECK_OK(expr) do { uint32_t st_ = (expr); if (st_ != NOTIFY_STATUS_OK) FAIL("%s returned %u (%s)", #expr, st_, notifyd_status_string(st_)); } while (0)

/* Starts a daemon on a fresh socket and points NOTIFYD_SOCKET at it; stopped at exit. */
void h_start_daemon(void);
/* The same, with the daemon running as another user (the test must run as root). */
void h_start_daemon_as(uid_t uid);
/* Starts the daemon again on the same socket (after h_kill_daemon). */
void h_restart_daemon(void);
/* Sends `sig` to the daemon and reaps it. */
void h_kill_daemon(int sig);
const char *h_socket(void);
const char *h_notifyctl(void);
/* Runs a shell command line (with NOTIFYCTL and SOCKET exported); returns its exit status. */
int h_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A daemon-wide figure of the status document (PROTOCOL.md 11.3), e.g. "subscriptions". */
uint64_t h_status(const char *key);

/* Waits until `fd` is readable; fails the test with `what` after timeout_ms. */
void h_wait_readable(int fd, int timeout_ms, const char *what);
/* 1 if `fd` is readable right now. */
int h_readable(int fd);
long h_now_ms(void);
#define PASS() do { printf("ok\n"); return 0; } while (0)
#endif
