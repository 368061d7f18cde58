/* dispatch.c - notify_register_dispatch, built only when libdispatch is found (make HAVE_DISPATCH=1;
 * needs clang -fblocks). libdispatch and the blocks runtime are referenced weakly: libnotifyd.so does not
 * depend on them, and a program that calls notify_register_dispatch has them loaded already (it made
 * the queue). The handler is handed to the queue from the library's callback thread; a token cancelled
 * meanwhile (notify_cancel inside the handler included) runs its handler no more. */
#include "../include/notify.h"
#include "../include/notifyd.h"
#include <Block.h>
#include <dispatch/dispatch.h>
#include <stdlib.h>

#pragma weak dispatch_async_f
#pragma weak dispatch_retain
#pragma weak dispatch_release
#pragma weak _Block_copy
#pragma weak _Block_release

uint32_t nd_register_callback_destroy(const char *name, int *out_token, notifyd_callback_t cb, void *ctx,
                                      void (*destroy)(void *));

struct reg { dispatch_queue_t queue; notify_handler_t handler; };
struct job { int token; notify_handler_t handler; };

static void run_job(void *p) {
    struct job *j = p;
    if (notify_is_valid_token(j->token)) j->handler(j->token);
    Block_release(j->handler);
    free(j);
}

static void on_notification(int token, const notifyd_notification_t *n, void *ctx) {
    (void)n;
    struct reg *r = ctx;
    struct job *j = malloc(sizeof *j);
    if (!j) return;
    j->token = token;
    j->handler = Block_copy(r->handler);
    dispatch_async_f(r->queue, j, run_job);
}

static void destroy(void *ctx) {
    struct reg *r = ctx;
    Block_release(r->handler);
    dispatch_release(r->queue);
    free(r);
}

uint32_t notify_register_dispatch(const char *name, int *out_token, dispatch_queue_t queue, notify_handler_t handler) {
    if (!name) return NOTIFY_STATUS_INVALID_NAME;
    if (!out_token) return NOTIFY_STATUS_INVALID_TOKEN;
    if (!queue || !handler) return NOTIFY_STATUS_NULL_INPUT;
    struct reg *r = malloc(sizeof *r);
    if (!r) return NOTIFY_STATUS_FAILED;
    dispatch_retain(queue); /* "The given queue is retained by the system for the lifetime of the notification" */
    r->queue = queue;
    r->handler = Block_copy(handler);
    return nd_register_callback_destroy(name, out_token, on_notification, r, destroy);
}
