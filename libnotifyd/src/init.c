/* init.c - the process-wide state, and what happens to it across fork (Darwin's notify(3) semantics:
 * registrations belong to the process that made them; a forked child starts with none, and its first
 * call opens its own connection, so it can post and register; exec keeps nothing the library made
 * except the read ends of notify_register_file_descriptor pipes, which are the caller's). */
#define _GNU_SOURCE
#include "internal.h"
#include <stdlib.h>
#include <unistd.h>

struct nd_global g = {
    .lock = PTHREAD_MUTEX_INITIALIZER, .wlock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1, .conn_efd = -1, .defq = {.efd = -1},
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Only the state lock is held across fork, not the write lock: a thread may be blocked in send() with it
 * while the daemon waits for us to read, and the reader needs the state lock to go on reading. The child
 * gets a fresh write lock instead (the thread that held it does not exist there). */
static void prepare(void) { pthread_mutex_lock(&g.lock); }
static void parent(void) { pthread_mutex_unlock(&g.lock); }

static void free_table(struct htab *t, void (*f)(struct hnode *)) {
    for (size_t i = 0; i < t->cap; i++)
        for (struct hnode *n = t->slots[i], *next; n; n = next) { next = n->next; f(n); }
    htab_free(t);
}
static void free_state(struct hnode *n) { struct nd_state *s = container_of(n, struct nd_state, node); free(s->name); free(s); }
static void free_sub(struct hnode *n) { nd_sub_free(container_of(n, struct nd_sub, node)); }
static void free_entry(struct hnode *n) {
    struct nd_entry *e = container_of(n, struct nd_entry, node);
    for (struct nd_token *t = e->head, *next; t; t = next) {
        next = t->enext;
        t->cancelled = 1;
        t->entry = NULL;
        if (!t->queued) nd_free_token(t); /* queued ones are freed with their queue below */
    }
    free(e->text);
    free(e);
}

/* Frees the tokens waiting on a queue (those not freed with their entry: see free_entry). */
static void drop_queue(struct notifyd_queue *q) {
    for (struct nd_token *t = q->head, *next; t; t = next) {
        next = t->qnext;
        t->queued = 0;
        nd_free_token(t);
    }
    q->head = q->tail = NULL;
}

/* In the child: the threads are gone and the connection is the parent's. Drop everything. */
static void child(void) {
    pthread_mutex_init(&g.wlock, NULL);
    pthread_mutex_unlock(&g.lock);
    pthread_cond_init(&g.cond, NULL);
    pthread_cond_init(&g.cbcond, NULL);
    if (g.fd >= 0) close(g.fd); /* our copy only: the parent's connection goes on */
    g.fd = -1;
    g.gen++;
    g.welcomed = g.have_instance = 0;
    g.reader_running = g.cb_running = 0;
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
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_cond_init(&g.cond, &a);
    pthread_cond_init(&g.cbcond, &a);
    pthread_condattr_destroy(&a);
    pthread_atfork(prepare, parent, child);
}

void nd_init(void) { pthread_once(&once, init_once); }
