/* t_callback: what <notifyd.h> adds: payloads and the poster's credentials in callbacks, patterns,
 * retained notifications at registration, queue policy, callbacks run from a caller's queue (its eventfd in
 * a poll loop), the ack with the delivered count, and introspection. */
#define _GNU_SOURCE
#include "harness.h"
#include <string.h>
#include <unistd.h>

#define MAX 16
static struct got { int token; char name[64]; char payload[128]; size_t len; notifyd_sender_t sender; int retained; uint64_t merged; } got[MAX];
static int ngot;

static void on_note(int token, const notifyd_notification_t *n, void *ctx) {
    if (ngot >= MAX) FAIL("too many callbacks");
    struct got *g = &got[ngot++];
    g->token = token;
    snprintf(g->name, sizeof g->name, "%s", n->name);
    CHECK(n->payload_length < sizeof g->payload);
    if (n->payload_length) memcpy(g->payload, n->payload, n->payload_length);
    g->len = n->payload_length;
    g->sender = n->sender;
    g->retained = n->retained;
    g->merged = n->merged;
    CHECK(ctx == (void *)0x1234, "context passed through");
}

static void run_until(notifyd_queue_t *q, int count, const char *what) {
    while (ngot < count) {
        h_wait_readable(notifyd_queue_fd(q), TIMEOUT_MS, what);
        notifyd_queue_run(q);
    }
}

int main(void) {
    h_start_daemon();
    notifyd_queue_t *q = notifyd_queue_create();
    void *ctx = (void *)0x1234;
    int exact, pat, ret, queued;

    /* A retained post made before anyone registers. */
    CHECK_OK(notifyd_post("org.test.cb.temperature", "21C", 3, NOTIFYD_POST_RETAIN | NOTIFYD_POST_ACK, NULL));

    notifyd_register_options_t o_ret = {.flags = NOTIFYD_REG_RETAINED};
    CHECK_OK(notifyd_register_callback("org.test.cb.temperature", &ret, q, on_note, ctx, &o_ret));
    run_until(q, 1, "the retained notification");
    CHECK(got[0].token == ret && got[0].retained && got[0].len == 3 && memcmp(got[0].payload, "21C", 3) == 0);

    CHECK_OK(notifyd_register_callback("org.test.cb.exact", &exact, q, on_note, ctx, NULL));
    notifyd_register_options_t o_pat = {.flags = NOTIFYD_REG_PATTERN};
    CHECK_OK(notifyd_register_callback("org.test.cb.>", &pat, q, on_note, ctx, &o_pat));
    uint32_t delivered = 0;
    CHECK_OK(notifyd_post("org.test.cb.exact", "hello", 5, NOTIFYD_POST_ACK, &delivered));
    CHECK(delivered == 1, "one connection (this one) took it, said %u", delivered);
    run_until(q, 3, "exact and pattern callbacks");
    int seen_exact = 0, seen_pat = 0;
    for (int i = 1; i < 3; i++) {
        CHECK(strcmp(got[i].name, "org.test.cb.exact") == 0 && got[i].len == 5 && memcmp(got[i].payload, "hello", 5) == 0);
        CHECK(got[i].sender.pid == getpid() && got[i].sender.uid == getuid() && got[i].sender.gid == getgid(),
              "the sender is this process, as the kernel told the daemon");
        CHECK(!got[i].retained);
        seen_exact += got[i].token == exact;
        seen_pat += got[i].token == pat;
    }
    CHECK(seen_exact == 1 && seen_pat == 1);

    /* Another process's post carries its credentials. */
    CHECK(h_sh("\"$NOTIFYCTL\" --socket \"$SOCKET\" post org.test.cb.other payload >/dev/null") == 0);
    run_until(q, 4, "the pattern callback for notifyctl's post");
    CHECK(got[3].token == pat && strcmp(got[3].name, "org.test.cb.other") == 0);
    CHECK(got[3].sender.pid != getpid() && got[3].sender.pid > 0, "notifyctl's pid");

    /* Queue policy; invalid policies are refused locally. */
    notifyd_register_options_t o_q = {.policy = NOTIFYD_POLICY_QUEUE, .queue_limit = 10};
    CHECK_OK(notifyd_register_callback("org.test.cb.queued", &queued, q, on_note, ctx, &o_q));
    notifyd_register_options_t bad = {.policy = NOTIFYD_POLICY_QUEUE, .queue_limit = 0};
    int t;
    CHECK(notifyd_register_callback("org.test.cb.bad", &t, q, on_note, ctx, &bad) == NOTIFY_STATUS_INVALID_REQUEST);
    bad.policy = 7;
    CHECK(notifyd_register_callback("org.test.cb.bad", &t, q, on_note, ctx, &bad) == NOTIFY_STATUS_INVALID_REQUEST);
    CHECK(notifyd_register_callback("org.test.*", &t, q, on_note, ctx, NULL) == NOTIFY_STATUS_INVALID_NAME,
          "a pattern needs NOTIFYD_REG_PATTERN");
    CHECK(notifyd_register_callback("org.>.x", &t, q, on_note, ctx, &o_pat) == NOTIFY_STATUS_INVALID_NAME);
    CHECK_OK(notifyd_post("org.test.cb.queued", NULL, 0, 0, NULL));
    run_until(q, 6, "queued and pattern");

    /* Introspection. */
    char *json = NULL;
    CHECK_OK(notifyd_query(2, "org.test.cb.>", &json));
    CHECK(strstr(json, "\"org.test.cb.exact\"") && strstr(json, "\"org.test.cb.temperature\""), "names: %s", json);
    free(json);
    CHECK_OK(notifyd_query(3, "", &json));
    CHECK(json[0] == '[', "clients: %s", json);
    free(json);

    /* A payload larger than the daemon allows. */
    static char big[70000];
    CHECK(notifyd_post("org.test.cb.exact", big, sizeof big, NOTIFYD_POST_ACK, NULL) == NOTIFY_STATUS_INVALID_REQUEST);
    CHECK(notifyd_post("org.test.cb.exact", NULL, 3, 0, NULL) == NOTIFY_STATUS_NULL_INPUT);

    /* A queue still in use cannot be destroyed. */
    CHECK(notifyd_queue_destroy(q) == NOTIFY_STATUS_INVALID_REQUEST);
    int toks[] = {exact, pat, ret, queued};
    for (int i = 0; i < 4; i++) CHECK_OK(notify_cancel(toks[i]));
    notifyd_queue_run(q);
    CHECK_OK(notifyd_queue_destroy(q));
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    CHECK(h_status("subscriptions") == 0);
    PASS();
}
