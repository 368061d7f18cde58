/* queue.c - where callbacks run: the library's callback thread (never the reader, so a callback may call
 * anything, notify_cancel of its own token included) or a caller's queue, signalled through an eventfd and
 * run by notifyd_queue_run on the caller's thread. */
#define _GNU_SOURCE
#include "internal.h"
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

/* Queues a token's callback (once: later notifications merge into the waiting one). Lock held. */
void nd_queue_push(struct notifyd_queue *q, struct nd_token *t) {
    t->queued = 1;
    t->refs++;
    t->qnext = NULL;
    if (q->tail) q->tail->qnext = t; else q->head = t;
    q->tail = t;
    if (q->efd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(q->efd, &one, sizeof one);
        (void)r;
    } else {
        pthread_cond_signal(&g.cbcond);
    }
}

/* Runs the first waiting callback of `q`; 0 when there was none. Lock held (released during the call). */
static int run_one(struct notifyd_queue *q) {
    struct nd_token *t = q->head;
    if (!t) return 0;
    q->head = t->qnext;
    if (!q->head) q->tail = NULL;
    t->queued = 0;
    struct nd_note *note = t->last;
    uint64_t extra = t->extra_merged;
    t->last = NULL;
    t->extra_merged = 0;
    if (!t->cancelled && note) {
        notifyd_notification_t n = {
            .name = note->name, .payload = note->plen ? note->payload : NULL, .payload_length = note->plen,
            .sequence = note->seq, .merged = note->merged + extra,
            .sender = {(pid_t)note->pid, (uid_t)note->uid, (gid_t)note->gid}, .retained = note->retained,
        };
        notifyd_callback_t cb = t->cb;
        void *ctx = t->ctx;
        int id = t->id;
        UNLOCK();
        cb(id, &n, ctx);
        pthread_mutex_lock(&g.lock);
    }
    /* `t` is still ours: we hold the reference the queue took, also in a child forked by the callback
     * (the atfork handler drops only the registrations' and the queues' references). */
    nd_note_unref(note);
    nd_token_unref(t);
    return 1;
}

static void *callback_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g.lock);
    for (;;) {
        if (!run_one(&g.defq)) pthread_cond_wait(&g.cbcond, &g.lock);
    }
    return NULL;
}

void nd_start_callback_thread(void) {
    if (g.cb_running) return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&g.cbthread, &attr, callback_main, NULL) == 0) g.cb_running = 1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

notifyd_queue_t *notifyd_queue_create(void) {
    LOCK();
    struct notifyd_queue *q = calloc(1, sizeof *q);
    if (q && (q->efd = eventfd_cloexec()) < 0) { free(q); q = NULL; }
    if (q) { q->next = g.queues; g.queues = q; }
    UNLOCK();
    return q;
}

int notifyd_queue_fd(notifyd_queue_t *q) { return q ? q->efd : -1; }

int notifyd_queue_run(notifyd_queue_t *q) {
    if (!q) return 0;
    LOCK();
    uint64_t v;
    ssize_t r = read(q->efd, &v, sizeof v); /* reset before running: a later push signals again */
    (void)r;
    int ran = 0;
    /* Only what is waiting now: a callback that re-arms itself cannot keep us here forever. */
    struct nd_token *last = q->tail;
    while (q->head) {
        int was_last = q->head == last;
        ran += run_one(q);
        if (was_last) break;
    }
    UNLOCK();
    return ran;
}

uint32_t notifyd_queue_destroy(notifyd_queue_t *q) {
    if (!q) return NOTIFY_STATUS_NULL_INPUT;
    LOCK();
    if (q->users > 0) { UNLOCK(); return NOTIFY_STATUS_INVALID_REQUEST; }
    while (q->head) run_one(q); /* only cancelled tokens are left: this frees them */
    for (struct notifyd_queue **pp = &g.queues; *pp; pp = &(*pp)->next)
        if (*pp == q) { *pp = q->next; break; }
    close(q->efd);
    free(q);
    UNLOCK();
    return NOTIFY_STATUS_OK;
}
