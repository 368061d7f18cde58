/* internal.h - the library's process-wide state and the functions its files share.
 *
 * Locking: one mutex `g.lock` guards everything below except `posted` counters (atomic). A second mutex
 * `g.wlock` serialises writes to the socket. A writer takes g.lock, then g.wlock, then releases g.lock
 * while it writes ("hand over hand"): frames reach the wire in the order the state changes were made,
 * yet the reader thread can take g.lock (and keep reading) while a writer is blocked in send(), so a
 * daemon that stops reading until we read its replies cannot deadlock us. Order is always lock, then
 * wlock. User callbacks never run with either held. */
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
    struct hnode node; /* in g.tokens once registered */
    int id;
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
    struct nd_waiter *next;
};

struct nd_state { struct hnode node; char *name; uint64_t value; };

struct nd_global {
    pthread_mutex_t lock, wlock;
    pthread_cond_t cond, cbcond;
    int fd;
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
/* reader.c */
void *nd_reader_main(void *arg);
uint32_t nd_ensure_connected(void);                     /* lock held */
uint32_t nd_send(struct wbuf *b);                        /* lock held (released during the write) */
uint32_t nd_request(struct nd_waiter *w, struct wbuf *b); /* lock held; w->id set; waits for the reply */
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
