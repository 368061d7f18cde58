/* init.c - the process-wide state, and what happens to it across fork (Darwin's notify(3) semantics:
 * registrations belong to the process that made them; a forked child starts with none, and its first
 * call opens its own connection, so it can post and register; exec keeps nothing the library made
 * except the read ends of notify_register_file_descriptor pipes, which are the caller's). */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS 30000 /* a daemon that neither reads nor answers for this long is given up on */

struct nd_global g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1, .conn_efd = -1, .wake_efd = -1, .defq = {.efd = -1}, .timeout_ms = DEFAULT_TIMEOUT_MS,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Deadlines are on the monotonic clock: a change of the wall clock neither shortens nor stretches them. */
static void init_conds(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g.cond, &a);
    pthread_cond_init(&g.cbcond, &a);
    pthread_cond_init(&g.roomcond, &a);
    pthread_condattr_destroy(&a);
}

/* The lock is held across fork: no thread holds it for long (nothing blocks with it held), and the child
 * gets consistent state. */
static void prepare(void) { pthread_mutex_lock(&g.lock); }
static void parent(void) { pthread_mutex_unlock(&g.lock); }

static void free_table(struct htab *t, void (*f)(struct hnode *)) {
    for (size_t i = 0; i < t->cap; i++)
        for (struct hnode *n = t->slots[i], *next; n; n = next) { next = n->next; f(n); }
    htab_free(t);
}
static void free_state(struct hnode *n) { struct nd_state *s = container_of(n, struct nd_state, node); free(s->name); free(s); }
static void free_sub(struct hnode *n) { nd_sub_free(container_of(n, struct nd_sub, node)); }
/* Drops the registration's reference of every token of the entry. A token is freed with its last
 * reference: one a callback of the forking thread is running (fork inside a callback) lives until that
 * callback returns. */
static void free_entry(struct hnode *n) {
    struct nd_entry *e = container_of(n, struct nd_entry, node);
    for (struct nd_token *t = e->head, *next; t; t = next) {
        next = t->enext;
        t->cancelled = 1;
        t->entry = NULL;
        t->sub = NULL; /* the subscriptions are freed below */
        t->in_map = t->ready = 0;
        nd_token_unref(t);
    }
    free(e->text);
    free(e);
}

/* Drops the queue's reference of the tokens waiting on it. */
static void drop_queue(struct notifyd_queue *q) {
    for (struct nd_token *t = q->head, *next; t; t = next) {
        next = t->qnext;
        t->queued = 0;
        nd_token_unref(t);
    }
    q->head = q->tail = NULL;
}

/* In the child: the threads are gone and the connection is the parent's. Drop everything. Only the forking
 * thread exists: if it is the callback thread (fork inside a callback on it), it goes on as the child's
 * callback thread when the callback returns. */
static void child(void) {
    pthread_mutex_unlock(&g.lock);
    init_conds();
    if (g.fd >= 0) close(g.fd); /* our copy only: the parent's connection goes on */
    g.fd = -1;
    g.broken = 0;
    g.gen++;
    g.welcomed = g.have_instance = 0;
    g.reader_running = 0;
    g.cb_running = g.cb_running && pthread_equal(g.cbthread, pthread_self());
    if (g.wake_efd >= 0) close(g.wake_efd); /* shared with the parent's reader: the child makes its own */
    g.wake_efd = -1;
    wbuf_free(&g.out); /* the parent's requests */
    g.out_pos = 0;
    g.out.failed = 0;
    g.room_head = g.room_tail = NULL; /* waiters on the stacks of threads the child does not have */
    g.poll_out = 0;
    free(g.rbuf); /* the parent's reader thread's buffer */
    g.rbuf = NULL;
    g.waiters = NULL; /* they lived on the stacks of threads the child does not have */
    /* The read ends of descriptor tokens are the program's (Darwin leaves them open in the child too):
     * freeing the tokens below closes only the library's write ends. */
    for (struct nd_pipe *p = g.pipes; p; p = p->next) p->rfd = -1;
    htab_free(&g.tokens); /* every token is also on an entry's list or a queue */
    free_table(&g.entries, free_entry);
    g.patterns = NULL;
    drop_queue(&g.defq);
    for (struct notifyd_queue *q = g.queues; q; q = q->next) drop_queue(q); /* the queues stay the program's */
    free_table(&g.subs, free_sub);
    free_table(&g.states, free_state);
    free_table(&g.self_states, free_state);
}

static void init_once(void) {
    init_conds();
    /* NOTIFYD_TIMEOUT_MS: how long a call waits for a daemon that neither reads nor answers. */
    const char *env = getenv("NOTIFYD_TIMEOUT_MS");
    if (env && *env) {
        char *end;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (!errno && !*end && v > 0 && v <= 24L * 3600 * 1000) g.timeout_ms = (int)v;
    }
    pthread_atfork(prepare, parent, child);
}

void nd_init(void) { pthread_once(&once, init_once); }
