/* t_random: 1,000 registrations, then RANDOM_ACTIONS random actions (default 100,000; `make stress` runs
 * 1,000,000): cancel and re-register with a random kind, post (daemon and "self." names), suspend,
 * resume, check, set and get state, run callbacks. At the end, after resuming and cancelling everything,
 * the daemon's tables are back to their baseline (subscriptions, subscribed names, patterns) and so are
 * the process's descriptors. SEED picks the sequence (printed). */
#define _GNU_SOURCE
#include "harness.h"
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOKENS 1000
#define NAMES 60

struct slot { int token, kind, suspended, fd; char name[64]; };
static struct slot slots[TOKENS];
static notifyd_queue_t *q;
static int shared_fd = -1;
static unsigned seed;

static unsigned rnd(unsigned n) { return (unsigned)rand_r(&seed) % n; }
/* The name each token registered, by token id (written once; slots are reused, so a callback must not
 * read its slot: the test thread may have refilled it meanwhile). */
static char (*registered)[64];
static long max_tokens;

static void on_note(int token, const notifyd_notification_t *n, void *ctx) {
    if (token < 0 || token >= max_tokens) FAIL("callback for token %d", token);
    const char *want = registered[token];
    if (!want[0] || strchr(want, '*')) return; /* not stored yet, or a pattern */
    if (strcmp(want, n->name) != 0) FAIL("token %d for %s got %s", token, want, n->name);
}

static int count_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void random_name(char *buf) {
    unsigned k = rnd(NAMES);
    if (k < 5) snprintf(buf, 64, "self.random.%u", k);
    else if (k < 8) snprintf(buf, 64, "org.test.random.*");
    else snprintf(buf, 64, "org.test.random.%u", k);
}

static void fill(struct slot *s) {
    random_name(s->name);
    int pattern = strchr(s->name, '*') != NULL;
    s->kind = pattern ? 4 : (int)rnd(5);
    s->fd = -1;
    s->suspended = 0;
    notifyd_register_options_t pat = {.flags = NOTIFYD_REG_PATTERN};
    switch (s->kind) {
    case 0: CHECK_OK(notify_register_check(s->name, &s->token)); break;
    case 1: {
        /* Half on the shared descriptor, half on one of their own. */
        int fd = shared_fd, flags = shared_fd >= 0 && rnd(2) ? NOTIFY_REUSE : 0;
        CHECK_OK(notify_register_file_descriptor(s->name, &fd, flags, &s->token));
        if (shared_fd < 0) shared_fd = fd;
        s->fd = fd;
        break;
    }
    case 2: CHECK_OK(notify_register_signal(s->name, SIGURG, &s->token)); break;
    case 3: CHECK_OK(notifyd_register_callback(s->name, &s->token, NULL, on_note, s, NULL)); break;
    default: CHECK_OK(notifyd_register_callback(s->name, &s->token, q, on_note, s, pattern ? &pat : NULL)); break;
    }
    CHECK(s->token < max_tokens);
    snprintf(registered[s->token], sizeof registered[0], "%s", s->name);
}

int main(void) {
    const char *env = getenv("RANDOM_ACTIONS");
    long actions = env ? atol(env) : 100000;
    seed = getenv("SEED") ? (unsigned)atol(getenv("SEED")) : (unsigned)time(NULL);
    printf("RANDOM_ACTIONS=%ld SEED=%u\n", actions, seed);
    max_tokens = TOKENS + actions / 4 + 1000; /* a fifth of the actions re-register, on average */
    registered = calloc((size_t)max_tokens, sizeof *registered);
    h_start_daemon();
    signal(SIGURG, SIG_IGN);
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    uint64_t subs0 = h_status("subscriptions"), names0 = h_status("subscribed_names"), pats0 = h_status("patterns");
    int fds0 = count_fds();
    q = notifyd_queue_create();
    long start = h_now_ms();

    for (int i = 0; i < TOKENS; i++) fill(&slots[i]);
    char name[64];
    for (long a = 0; a < actions; a++) {
        struct slot *s = &slots[rnd(TOKENS)];
        int c;
        uint64_t v;
        switch (rnd(10)) {
        case 0: case 1:
            CHECK_OK(notify_cancel(s->token));
            CHECK(!notify_is_valid_token(s->token));
            if (s->fd >= 0 && s->fd == shared_fd) {
                /* The library closed the shared descriptor with its last token: stop reusing it. */
                int users = 0;
                for (int i = 0; i < TOKENS; i++) users += &slots[i] != s && slots[i].fd == shared_fd;
                if (!users) shared_fd = -1;
            }
            fill(s);
            break;
        case 2: case 3:
            random_name(name);
            if (!strchr(name, '*')) CHECK_OK(notify_post(name));
            break;
        case 4:
            CHECK_OK(notify_suspend(s->token));
            s->suspended++;
            break;
        case 5:
            if (s->suspended) { CHECK_OK(notify_resume(s->token)); s->suspended--; }
            break;
        case 6: CHECK_OK(notify_check(s->token, &c)); break;
        case 7:
            if (!strchr(s->name, '*')) CHECK_OK(notify_set_state(s->token, a));
            break;
        case 8:
            if (!strchr(s->name, '*')) CHECK_OK(notify_get_state(s->token, &v));
            break;
        default:
            notifyd_queue_run(q);
            /* Drain the descriptors now and then: a full pipe only drops, but keep them flowing. */
            if (rnd(20) == 0) {
                char buf[4096];
                for (int i = 0; i < TOKENS; i++)
                    while (slots[i].fd >= 0 && h_readable(slots[i].fd) && read(slots[i].fd, buf, sizeof buf) > 0) {}
            }
            break;
        }
    }
    for (int i = 0; i < TOKENS; i++) {
        while (slots[i].suspended) { CHECK_OK(notify_resume(slots[i].token)); slots[i].suspended--; }
        CHECK_OK(notify_cancel(slots[i].token));
    }
    notifyd_queue_run(q);
    CHECK_OK(notifyd_queue_destroy(q));
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    printf("%d registrations and %ld actions in %ld ms\n", TOKENS, actions, h_now_ms() - start);
    CHECK(h_status("subscriptions") == subs0, "subscriptions back to %llu", (unsigned long long)subs0);
    CHECK(h_status("subscribed_names") == names0);
    CHECK(h_status("patterns") == pats0);
    CHECK(count_fds() == fds0, "descriptors: %d at the start, %d now", fds0, count_fds());
    free(registered);
    PASS();
}
