/*
 * notify.h - Darwin's notify(3) API on Linux, served by notifyd.
 *
 * Source-compatible with the public <notify.h> of macOS: the same function names, types, constants and
 * status codes, so a program written for Darwin builds unchanged against libnotifyd. Extensions that
 * notify(3) lacks (payloads, sender credentials, patterns, policies, retained notifications, callbacks
 * without libdispatch) are declared in <notifyd.h>.
 */
#ifndef __NOTIFICATION_H__
#define __NOTIFICATION_H__

#include <stdbool.h>
#include <stdint.h>

#if defined(__has_include)
#  if __has_include(<dispatch/dispatch.h>) && defined(__BLOCKS__) && !defined(NOTIFYD_NO_DISPATCH)
#    include <dispatch/dispatch.h>
#    define NOTIFYD_HAVE_DISPATCH_API 1
#  endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define NOTIFY_STATUS_OK 0
#define NOTIFY_STATUS_INVALID_NAME 1
#define NOTIFY_STATUS_INVALID_TOKEN 2
#define NOTIFY_STATUS_INVALID_PORT 3
#define NOTIFY_STATUS_INVALID_FILE 4
#define NOTIFY_STATUS_INVALID_SIGNAL 5
#define NOTIFY_STATUS_INVALID_REQUEST 6
#define NOTIFY_STATUS_NOT_AUTHORIZED 7
#define NOTIFY_STATUS_OPT_DISABLE 8
#define NOTIFY_STATUS_SERVER_NOT_FOUND 9
#define NOTIFY_STATUS_NULL_INPUT 10
#define NOTIFY_STATUS_FAILED 1000000

/* Flag bits used for registration. */
#define NOTIFY_REUSE 0x00000001

/* Token values are zero or positive integers; this is a handy initial value for an in/out token. */
#define NOTIFY_TOKEN_INVALID -1

/* Linux has no Mach ports: the type exists so that Darwin code compiles, and
 * notify_register_mach_port always returns NOTIFY_STATUS_INVALID_PORT. */
#ifndef NOTIFYD_MACH_PORT_T_DEFINED
#define NOTIFYD_MACH_PORT_T_DEFINED 1
typedef unsigned int mach_port_t;
#endif

/* Does not wait for the daemon's answer: returns once the notification is written to the socket or queued
 * in the library behind what the daemon has not read yet. Waits only while that queue is full (1 MiB), at
 * most NOTIFYD_TIMEOUT_MS (30 s by default); a daemon that read nothing for that long is taken for hung,
 * its connection dropped and reopened, and the call returns NOTIFY_STATUS_SERVER_NOT_FOUND. */
uint32_t notify_post(const char *name);

#ifdef NOTIFYD_HAVE_DISPATCH_API
typedef void (^notify_handler_t)(int token);
/* Present only in a libnotifyd built with libdispatch (make HAVE_DISPATCH=1, detected by default). */
uint32_t notify_register_dispatch(const char *name, int *out_token, dispatch_queue_t queue,
                                  notify_handler_t handler);
#endif

uint32_t notify_register_check(const char *name, int *out_token);
uint32_t notify_register_signal(const char *name, int sig, int *out_token);
uint32_t notify_register_mach_port(const char *name, mach_port_t *notify_port, int flags, int *out_token);
uint32_t notify_register_file_descriptor(const char *name, int *notify_fd, int flags, int *out_token);
uint32_t notify_check(int token, int *check);
uint32_t notify_cancel(int token);
uint32_t notify_suspend(int token);
uint32_t notify_resume(int token);
uint32_t notify_set_state(int token, uint64_t state64);
uint32_t notify_get_state(int token, uint64_t *state64);
bool notify_is_valid_token(int val);

#ifdef __cplusplus
}
#endif

#endif /* __NOTIFICATION_H__ */
