/* internal.h - the library's process-wide state and the functions its files share.
 *
 * Locking: one mutex `g.lock` guards everything below except `posted` counters (atomic). Nothing blocks
 * while holding it: the socket is non-blocking; a frame is appended to the outbound buffer `g.out` under
 * the lock (so frames reach the wire in the order of the state changes) and written at once as far as the
 * kernel takes it; the reader thread writes the rest when the socket is writable (poll). A call that finds
 * the outbound buffer full waits on a condition variable (the lock released), in FIFO order, until there is
 * room, the connection ends, or its deadline passes; the reader drops a connection whose daemon has read
 * nothing for the library's timeout, as for a dead daemon. User callbacks never run with the lock held. */
#ifndef ND_INTERNAL_H
#define ND_INTERNAL_H
#include "../include/notify.h"
#include "../include/notifyd.h"
#include "names.h"
#include "table.h"
#include "wire.h"
#include <pthread.h>
#include <stdatomic.h>

/* A notification as delivered to callbacks; shared (refcounted) by every token it reaches. */
struct nd_note {
    int refs;
    char *name;
    void *payload;
    size_t plen;
    uint64_t seq, merged;
    uint32_t pid, uid, gid;
    int retained;
};

/* A pipe made by notify_register_file_descriptor; shared by the tokens that reuse it, closed with the
 * last of them. */
struct nd_pipe { int rfd, wfd, refs; struct nd_pipe *next; };

enum nd_kind { TK_CHECK, TK_FD, TK_SIGNAL, TK_CALLBACK };

/* Tokens by the name or pattern they observe: where a NOTIFICATION (which carries only the name) is
 * routed to. */
struct nd_entry {
    struct hnode node;
    char *text;
    int is_pattern;
    struct nd_token *head;
    struct nd_entry *pnext, *pprev; /* the list of pattern entries */
};

/* One subscription in the daemon, shared by all tokens with the same name and options, so 500 tokens of one
 * name cost one SUBSCRIBE. */
enum { SUB_PENDING, SUB_ACTIVE, SUB_FAILED };
struct nd_sub {
    struct hnode node;
    char *key, *text;
    uint32_t id, limit;
    uint8_t flags, policy;
    int refs, state, in_map;
    uint32_t status;
};

struct nd_token {
    struct hnode node; /* in g.tokens from the moment it has an id (so that no other token gets that id) */
    int id;
    int ready;         /* registered: the API sees it (nd_token_find) */
    enum nd_kind kind;
    struct nd_entry *entry;
    struct nd_token *enext, *eprev;
    struct nd_sub *sub; /* NULL for "self." names */
    _Atomic uint64_t posted; /* deliveries, counted by the reader thread: what notify_check compares */
    uint64_t seen;
    int checked;
    int suspend, pending;
    int sig;
    struct nd_pipe *pipe;
    notifyd_callback_t cb;
    void *ctx;
    void (*destroy)(void *ctx);
    struct notifyd_queue *queue;
    struct nd_note *last;  /* the notification a waiting or suspended callback will see */
    uint64_t extra_merged; /* notifications coalesced into `last` by the library */
    int queued;
    struct nd_token *qnext;
    int refs, cancelled, in_map;
};

struct notifyd_queue {
    int efd; /* -1 for the library's callback thread, which waits on g.cbcond */
    struct nd_token *head, *tail;
    int users;
    struct notifyd_queue *next; /* all user queues, for the fork child */
};

/* A thread waiting for the reply to one request. Lives on that thread's stack. */
struct nd_waiter {
    uint32_t id;
    int done;
    uint32_t status;
    uint64_t value;
    uint32_t delivered;
    struct nd_sub *sub;     /* SUBSCRIBE: the subscription it activates */
    struct nd_token *token; /* SUBSCRIBE with retained: who gets RETAINED frames */
    struct wbuf json;       /* QUERY: the answer, parts concatenated */
    int parts;
    int timed_out;          /* the deadline passed first (status NOTIFY_STATUS_FAILED) */
    struct nd_waiter *next;
};

struct nd_state { struct hnode node; char *name; uint64_t value; };

/* A call waiting for room in the outbound buffer. Lives on that thread's stack. */
struct nd_room { struct nd_room *next; };

struct nd_global {
    pthread_mutex_t lock;
    pthread_cond_t cond, cbcond, roomcond; /* on CLOCK_MONOTONIC */
    int fd;                 /* non-blocking */
    int broken;             /* fd is shut down (a write failed, the daemon is hung): the reader drops it */
    uint64_t gen;
    int welcomed, have_instance;
    uint8_t instance[16];
    uint32_t max_frame;
    uint16_t max_name;
    uint32_t next_req, next_sub;
    int next_token;
    struct htab tokens, entries, subs, states, self_states;
    struct nd_entry *patterns;
    struct nd_waiter *waiters;
    struct nd_pipe *pipes;
    struct notifyd_queue defq, *queues;
    int reader_running, cb_running;
    pthread_t reader, cbthread;
    uint32_t backoff_ms, goodbye_ms;
    int conn_efd;
    /* Outbound: bytes out.data[out_pos..out.len) are not yet taken by the kernel; out_since is when they
     * last made progress (or became pending). Callers waiting for room queue on room_head. */
    struct wbuf out;
    size_t out_pos;
    struct timespec out_since;
    struct nd_room *room_head, *room_tail;
    int wake_efd;  /* eventfd: wakes the reader from poll() to write what is pending */
    int poll_out;  /* the reader is in poll() waiting for the socket to be writable */
    int timeout_ms; /* how long to wait for a daemon that neither reads nor answers (NOTIFYD_TIMEOUT_MS) */
    uint8_t *rbuf; /* the reader thread's receive buffer */
    size_t rcap;
    char last_error[256];
};
extern struct nd_global g;

void nd_init(void); /* once per process: locks, atfork */
#define LOCK() (nd_init(), pthread_mutex_lock(&g.lock))
#define UNLOCK() pthread_mutex_unlock(&g.lock)

/* conn.c */
uint32_t nd_connect_locked(void);                       /* lock held; g.fd < 0 */
void nd_remove_waiter(struct nd_waiter *w);
void nd_deadline(struct timespec *ts, long ms);           /* CLOCK_MONOTONIC now + ms */
long nd_ms_left(const struct timespec *ts);              /* until ts; <= 0 when passed */
int nd_wait_until(pthread_cond_t *c, const struct timespec *until); /* lock held; ETIMEDOUT when passed */
/* Appends a frame for the daemon and writes what the socket takes. Lock held; never blocks on the socket.
 * With `until` NULL the frame is appended whatever the buffer holds (small, bounded frames: unsubscribes,
 * the reader's own); otherwise the call waits (lock released) while the buffer is full, at most until
 * `until`. NOTIFY_STATUS_SERVER_NOT_FOUND when there is no connection, it ends meanwhile, or the daemon did
 * not make room in time. */
uint32_t nd_send(struct wbuf *b, const struct timespec *until);
int nd_flush_locked(void); /* writes what the socket takes; -1 when the connection failed (errno) */
long nd_stall_left(void); /* ms until pending output has waited the timeout without progress */
int nd_stalled(void);      /* the daemon has read nothing pending for the timeout (sets the error) */
void nd_reset_out(void);
/* Sends a request and waits for its reply, at most until `until` (NULL: the library's timeout). Lock held;
 * w->id set. */
uint32_t nd_request(struct nd_waiter *w, struct wbuf *b, const struct timespec *until);
/* reader.c */
void *nd_reader_main(void *arg);
/* Connects unless connected. Lock held; may release it (waiting for the reader to drop a broken
 * connection), so callers copy what they need of a token first. */
uint32_t nd_ensure_connected(void);
uint32_t nd_next_req(void);
uint32_t nd_status_of_error(uint16_t code);
void nd_set_error(const char *fmt, ...);
const char *nd_socket_path(char *buf, size_t n);

/* registry.c */
struct nd_token *nd_token_new(enum nd_kind kind);
struct nd_token *nd_token_find(int id);
uint32_t nd_register(struct nd_token *t, const char *name, const notifyd_register_options_t *opts, int *out);
uint32_t nd_cancel(int id);
void nd_token_unref(struct nd_token *t);
void nd_route(const char *name, size_t name_len, const struct frame *f, int retained, struct nd_token *only);
void nd_fire(struct nd_token *t);
void nd_note_unref(struct nd_note *n);
void nd_free_token(struct nd_token *t);
void nd_sub_free(struct nd_sub *s);
/* queue.c */
void nd_start_callback_thread(void);
void nd_queue_push(struct notifyd_queue *q, struct nd_token *t);
/* ext.c */
int eventfd_cloexec(void);
#endif
