/*
 * notifyd.h - what notify(3) lacks, for programs that use libnotifyd directly.
 *
 * Everything here works alongside <notify.h>: tokens are the same tokens (notify_cancel, notify_check,
 * notify_suspend, notify_resume, notify_get_state and notify_set_state accept them).
 */
#ifndef NOTIFYD_H
#define NOTIFYD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <notify.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Who posted a notification, as the kernel told the daemon (SO_PEERCRED of the poster's connection):
 * verified, not claimed by the poster. For a process-local ("self.") notification, this process. */
typedef struct notifyd_sender {
    pid_t pid;
    uid_t uid;
    gid_t gid;
} notifyd_sender_t;

/* One notification as a callback sees it. Every pointer is valid only during the callback. */
typedef struct notifyd_notification {
    const char *name;        /* the name as posted, NUL-terminated (names never contain NUL) */
    const void *payload;     /* the payload as posted (NULL when payload_length is 0) */
    size_t payload_length;
    uint64_t sequence;       /* the daemon's sequence number of the post (0 for "self." names) */
    uint64_t merged;         /* earlier notifications merged into this one, by the daemon or the library */
    notifyd_sender_t sender;
    int retained;            /* 1: the name's retained notification, sent at registration (NOTIFYD_REG_RETAINED) */
} notifyd_notification_t;

typedef void (*notifyd_callback_t)(int token, const notifyd_notification_t *notification, void *context);

/* A queue of callbacks that run on a thread of the caller's choosing: the library signals the queue's
 * event descriptor (an eventfd, readable while callbacks wait) and notifyd_queue_run runs them on the
 * thread that calls it. Add the descriptor to any poll/epoll/select loop. */
typedef struct notifyd_queue notifyd_queue_t;
notifyd_queue_t *notifyd_queue_create(void);
int notifyd_queue_fd(notifyd_queue_t *queue);
/* Runs the callbacks waiting on the queue; returns how many ran. Never blocks. */
int notifyd_queue_run(notifyd_queue_t *queue);
/* Destroys a queue. Cancel its tokens first: NOTIFY_STATUS_INVALID_REQUEST while a token still uses it. */
uint32_t notifyd_queue_destroy(notifyd_queue_t *queue);

/* Delivery policies for the daemon to apply when this process cannot take notifications in time
 * (PROTOCOL.md 9.4). */
#define NOTIFYD_POLICY_COALESCE 0   /* keep the latest per name (the default) */
#define NOTIFYD_POLICY_QUEUE 1      /* keep up to queue_limit in order, drop the oldest */
#define NOTIFYD_POLICY_DISCONNECT 2 /* close the connection; the library reconnects and re-registers */

/* Registration flags. */
#define NOTIFYD_REG_PATTERN 0x1  /* the name is a pattern with "*" and ">" labels (PROTOCOL.md 8.1) */
#define NOTIFYD_REG_RETAINED 0x2 /* first deliver the retained notifications of the matching names */

typedef struct notifyd_register_options {
    uint32_t flags;       /* NOTIFYD_REG_* */
    int policy;           /* NOTIFYD_POLICY_* */
    uint32_t queue_limit; /* for NOTIFYD_POLICY_QUEUE: at least 1; otherwise 0 */
} notifyd_register_options_t;

/* Registers `callback` for `name`. With `queue` NULL it runs on the library's callback thread (one
 * thread per process, never the thread that reads the socket, so a callback may call any function of
 * the library, notify_cancel of its own token included); otherwise on whichever thread calls
 * notifyd_queue_run(queue). Notifications that arrive while a callback is waiting are coalesced into
 * it (notification->merged counts them). After notify_cancel(token) returns, the callback is not
 * started again. `options` may be NULL (an exact name, coalesce, no retained). */
uint32_t notifyd_register_callback(const char *name, int *out_token, notifyd_queue_t *queue,
                                   notifyd_callback_t callback, void *context,
                                   const notifyd_register_options_t *options);

/* Posting flags. */
#define NOTIFYD_POST_RETAIN 0x2 /* keep this post as the name's retained notification */
#define NOTIFYD_POST_ACK 0x1    /* wait for the daemon's answer: the status is its verdict */

/* Posts `name` with a payload (up to the daemon's max payload, 64 KiB by default). With NOTIFYD_POST_ACK
 * the call waits for the daemon (at most NOTIFYD_TIMEOUT_MS, 30 s by default) and stores how many
 * connections took the notification in *delivered (may be NULL); without it, it waits no more than
 * notify_post (see <notify.h>). */
uint32_t notifyd_post(const char *name, const void *payload, size_t length, uint32_t flags,
                      uint32_t *delivered);

/* Waits until the library is connected and the daemon has processed everything this process sent before
 * (its registrations included), at most timeout_ms milliseconds (whatever NOTIFYD_TIMEOUT_MS says). A
 * barrier: after it returns NOTIFY_STATUS_OK, every earlier post of this process has been fanned out and
 * every registration is active in the daemon, also after a reconnection. NOTIFY_STATUS_SERVER_NOT_FOUND on
 * timeout (no daemon, or one that did not answer or read in time; notifyd_last_error says which). */
uint32_t notifyd_sync(int timeout_ms);

/* A descriptor (eventfd) that becomes readable whenever a notification reaches any token of this process:
 * a poll/epoll loop waits on it, reads it to reset it, then calls notify_check on its tokens. The library
 * keeps it for the life of the process (do not close it); -1 on failure. */
int notifyd_connection_fd(void);

/* The daemon's answer to an introspection QUERY (kind 1 status, 2 names, 3 clients; PROTOCOL.md 11.3) as a
 * malloc'ed JSON text in *json (free it). */
uint32_t notifyd_query(int kind, const char *argument, char **json);

/* Why the last connection attempt of this process failed, the connection was dropped, or a call gave up
 * waiting (e.g. an untrusted daemon, a protocol error, a daemon that stopped reading), or "". */
const char *notifyd_last_error(void);

/* A short description of a NOTIFY_STATUS_* code. */
const char *notifyd_status_string(uint32_t status);

#ifdef __cplusplus
}
#endif

#endif /* NOTIFYD_H */
