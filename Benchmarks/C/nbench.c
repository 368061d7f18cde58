/* nbench: the benchmark driver for every system (see Benchmarks/BENCHMARKS.md).
 *
 *   nbench ROLE --system notifyd|relay|redis|dbus --address SOCKET --board FILE [options]
 *
 * Roles: sub (subscriber: counts notifications into its board slot), pub (poster and coordinator of one
 * fan-out measurement, with flow control through the board), flood (poster and coordinator with no flow
 * control at all: it writes as fast as the system reads, then waits for the end marker), ping/pong (round
 * trip), idle (many idle connections with subscriptions, for memory), churn (connect + subscribe +
 * disconnect). Every role prints one JSON object on standard output. */
#include "bench.h"
#include "backend.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

struct board *board_open(const char *path, size_t nslots) {
    int fd = open(path, O_RDWR);
    if (fd < 0) die("cannot open board %s: %s", path, strerror(errno));
    struct stat sb;
    fstat(fd, &sb);
    if ((size_t)sb.st_size < BOARD_SIZE(nslots)) die("board %s is too small for %zu slots", path, nslots);
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) die("mmap %s: %s", path, strerror(errno));
    close(fd);
    return p;
}

static struct {
    const char *role, *system, *address, *board_path, *name, *name_prefix, *client_name;
    long slot, slots, name_count, name_first, name_last, patterns, pattern_first, posts, payload, window, subs, ignore_slot;
    long iterations, warmup, connections, subs_per_conn, batch;
    double max_seconds, seconds, drain_seconds, quiet_seconds;
    int spread;
    const char *policy;
} opt = {
    .name = "bench.fan", .name_prefix = "bench.names.n", .client_name = "nbench", .slots = 1, .name_last = -1,
    .posts = 100000, .payload = 64, .window = 1000, .subs = 1, .ignore_slot = -1, .iterations = 20000,
    .warmup = 2000, .connections = 100, .subs_per_conn = 10, .batch = 64, .max_seconds = 5, .seconds = 3,
    .drain_seconds = 30, .quiet_seconds = 2,
};

uint8_t bench_policy_code = 0; /* coalesce */
uint32_t bench_queue_limit = 0;
int bench_pipeline_hello = 0;

/* --policy coalesce | queue:N | queue:unbounded (the largest limit the wire allows, 2^32 - 1) | disconnect */
static void parse_policy(const char *text) {
    if (!strcmp(text, "coalesce")) { bench_policy_code = 0; bench_queue_limit = 0; return; }
    if (!strcmp(text, "disconnect")) { bench_policy_code = 2; bench_queue_limit = 0; return; }
    if (!strncmp(text, "queue:", 6)) {
        const char *n = text + 6;
        bench_policy_code = 1;
        if (!strcmp(n, "unbounded")) { bench_queue_limit = UINT32_MAX; return; }
        char *end;
        unsigned long long v = strtoull(n, &end, 10);
        if (*n && !*end && v >= 1 && v <= UINT32_MAX) { bench_queue_limit = (uint32_t)v; return; }
    }
    die("--policy must be coalesce, disconnect, queue:N (1 <= N < 2^32) or queue:unbounded, not '%s'", text);
}

/* The end marker of a flood: the last post's payload starts with this byte (ordinary payloads are 'x').
 * Every policy delivers it: coalesce keeps the latest, queue and the byte bound drop the oldest. */
#define END_MARK 'E'

static const struct backend *backend;
static struct board *board;

static const struct backend *pick_backend(const char *system) {
    if (!strcmp(system, "notifyd") || !strcmp(system, "relay")) return &notifyd_backend;
#ifdef HAVE_HIREDIS
    if (!strcmp(system, "redis")) return &redis_backend;
#endif
#ifdef HAVE_SDBUS
    if (!strcmp(system, "dbus")) return &dbus_backend;
#endif
#ifdef HAVE_LIBNOTIFYD
    if (!strcmp(system, "libnotifyd")) return &libnotifyd_backend;
#endif
    die("system '%s' is not supported by this build", system);
}

void pattern_text(const struct backend *b, size_t i, char *out, size_t cap) {
    /* Half share the posted names' first label, half start with a wildcard; none matches "bench.fan". */
    if (b == &notifyd_backend
#ifdef HAVE_LIBNOTIFYD
        || b == &libnotifyd_backend
#endif
    )
        snprintf(out, cap, i % 2 ? "*.q%zu.>" : "bench.p%zu.*", i);
    else
        snprintf(out, cap, i % 2 ? "*.q%zu.*" : "bench.p%zu.*", i);
}

static conn *open_or_die(void) {
    char err[512];
    conn *c = backend->open(opt.address, opt.client_name, err, sizeof err);
    if (!c) die("%s", err);
    return c;
}

static void subscribe_or_die(conn *c, char **names, size_t n, int patterns) {
    char err[512] = "";
    if (backend->subscribe(c, names, n, patterns, err, sizeof err) < 0) die("subscribe: %s", err);
}

static char *name_at(long i) {
    char *s;
    if (asprintf(&s, "%s%ld", opt.name_prefix, i) < 0) abort();
    return s;
}

static uint64_t cpu_ns_self(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

/* ---- sub ---- */

struct sub_state { uint64_t received, lost, merged_frames, dropped; int end_seen; };

static void count_note(void *arg, const char *name, size_t name_len, const uint8_t *payload, size_t payload_len, uint64_t lost) {
    (void)name_len;
    struct sub_state *s = arg;
    if (name) {
        s->received++;
        if (lost) s->merged_frames++; /* NOTIFICATION_MERGED: `lost` posts were merged into this one */
        if (payload_len > 0 && payload[0] == END_MARK) s->end_seen = 1;
    } else {
        s->dropped += lost; /* OVERFLOW: dropped, not merged */
    }
    s->lost += lost;
}

static int role_sub(void) {
    conn *c = open_or_die();
    struct board_slot *slot = &board->slots[opt.slot];
    if (opt.patterns > 0) {
        char **pats = malloc((size_t)opt.patterns * sizeof *pats);
        for (long i = 0; i < opt.patterns; i++) { pats[i] = malloc(64); pattern_text(backend, (size_t)(opt.pattern_first + i), pats[i], 64); }
        subscribe_or_die(c, pats, (size_t)opt.patterns, 1);
    } else if (opt.name_count > 0) {
        long last = opt.name_last < 0 ? opt.name_count : opt.name_last;
        size_t n = (size_t)(last - opt.name_first);
        char **names = malloc(n * sizeof *names);
        for (size_t i = 0; i < n; i++) names[i] = name_at(opt.name_first + (long)i);
        subscribe_or_die(c, names, n, 0);
    } else {
        char *names[1] = {(char *)opt.name};
        subscribe_or_die(c, names, 1, 0);
    }
    st(&slot->ready, 1);
    struct sub_state s = {0, 0, 0, 0, 0};
    char err[512] = "";
    int failed = 0;
    while (!ld(&board->stop)) {
        struct pollfd p = {backend->fd(c), POLLIN, 0};
        int r = poll(&p, 1, 20);
        if (r <= 0) continue;
        uint64_t before = s.received + s.lost;
        int pumped = backend->pump(c, count_note, &s, err, sizeof err);
        if (s.received + s.lost != before) {
            st(&slot->last_ns, now_ns());
            st(&slot->merged_frames, s.merged_frames);
            st(&slot->dropped, s.dropped);
            if (s.lost) st(&slot->merged, s.lost);
            st(&slot->received, s.received);
            if (s.end_seen) st(&slot->ready, 2); /* phase 2: the flood's end marker arrived */
        }
        if (pumped < 0) { failed = 1; break; }
    }
    st(&slot->received, s.received);
    if (failed) st(&slot->errors, 1);
    printf("{\"role\":\"sub\",\"slot\":%ld,\"received\":%llu,\"lost\":%llu,\"merged_frames\":%llu,\"dropped\":%llu,"
           "\"error\":\"%s\"}\n", opt.slot, (unsigned long long)s.received, (unsigned long long)s.lost,
           (unsigned long long)s.merged_frames, (unsigned long long)s.dropped, failed ? err : "");
    backend->close(c);
    return failed;
}

/* ---- pub: poster and coordinator ---- */

static int role_pub(void) {
    conn *c = open_or_die();
    backend->make_poster(c);
    backend->flush(c);
    uint8_t *payload = malloc((size_t)opt.payload + 1);
    memset(payload, 'x', (size_t)opt.payload);
    long nslots = opt.subs;
    /* wait until every subscriber is subscribed */
    uint64_t deadline = now_ns() + 180ull * 1000000000ull;
    for (long i = 0; i < nslots; i++)
        while (!ld(&board->slots[i].ready)) {
            if (now_ns() > deadline) die("subscriber %ld never became ready", i);
            sleep_us(1000);
        }
    char **names = NULL;
    size_t *lens = NULL;
    size_t fixed_len = strlen(opt.name);
    if (opt.spread) {
        names = malloc((size_t)opt.name_count * sizeof *names);
        lens = malloc((size_t)opt.name_count * sizeof *lens);
        for (long i = 0; i < opt.name_count; i++) { names[i] = name_at(i); lens[i] = strlen(names[i]); }
    }
    long active = nslots - (opt.ignore_slot >= 0 && opt.ignore_slot < nslots ? 1 : 0);
    uint64_t base[256] = {0};
    uint64_t base_received[256] = {0};
    for (long i = 0; i < nslots && i < 256; i++) {
        base_received[i] = ld(&board->slots[i].received);
        base[i] = base_received[i] + ld(&board->slots[i].merged);
    }
    uint64_t cpu0 = cpu_ns_self();
    uint64_t t0 = now_ns();
    uint64_t stop_at = t0 + (uint64_t)(opt.max_seconds * 1e9);
    uint64_t posted = 0, target = (uint64_t)opt.posts;
    uint64_t waits = 0;
    /* Progress: for fan-out the slowest active subscriber's count; for spread posts the sum of all. */
/* A merged notification accounts for the posts merged into it: the subscriber has caught up with them, so flow
 * control counts them (deliveries, reported, do not). */
#define PROGRESS(out) do { \
        uint64_t m = UINT64_MAX, sum = 0; \
        for (long i_ = 0; i_ < nslots; i_++) { \
            if (i_ == opt.ignore_slot) continue; \
            uint64_t r_ = ld(&board->slots[i_].received) + ld(&board->slots[i_].merged) - base[i_]; \
            sum += r_; if (r_ < m) m = r_; \
        } \
        (out) = opt.spread ? sum : m; \
    } while (0)
    while (posted < target) {
        uint64_t done;
        PROGRESS(done);
        uint64_t inflight = posted - (done > posted ? posted : done);
        if (inflight >= (uint64_t)opt.window) {
            waits++;
            sleep_us(20);
            if (now_ns() > stop_at) break;
            continue;
        }
        uint64_t room = (uint64_t)opt.window - inflight;
        uint64_t batch = room < (uint64_t)opt.batch ? room : (uint64_t)opt.batch;
        if (batch > target - posted) batch = target - posted;
        for (uint64_t j = 0; j < batch; j++) {
            if (opt.spread) {
                size_t idx = (size_t)((posted * 7919u) % (uint64_t)opt.name_count);
                backend->post(c, names[idx], lens[idx], payload, (size_t)opt.payload);
            } else {
                backend->post(c, opt.name, fixed_len, payload, (size_t)opt.payload);
            }
            posted++;
        }
        if (backend->flush(c) < 0) die("flush failed while posting");
        if (now_ns() > stop_at) break;
    }
    uint64_t t_posted = now_ns();
    /* wait for delivery of everything posted */
    uint64_t done = 0, last_done = 0, last_change = now_ns();
    int complete = 0;
    for (;;) {
        PROGRESS(done);
        if (done >= posted) { complete = 1; break; }
        uint64_t t = now_ns();
        if (done != last_done) { last_done = done; last_change = t; }
        if (t - last_change > 5000000000ull) break; /* no progress for 5 s: report what arrived */
        sleep_us(20);
    }
    uint64_t t1 = now_ns();
    uint64_t cpu1 = cpu_ns_self();
    uint64_t delivered = 0, lost = 0, errors = 0;
    for (long i = 0; i < nslots; i++) {
        if (i == opt.ignore_slot) continue;
        delivered += ld(&board->slots[i].received) - base_received[i];
        lost += ld(&board->slots[i].merged);
        errors += ld(&board->slots[i].errors);
    }
    st(&board->stop, 1);
    double seconds = (double)(t1 - t0) / 1e9;
    uint64_t expected = opt.spread ? posted : posted * (uint64_t)active;
    printf("{\"role\":\"pub\",\"system\":\"%s\",\"subscribers\":%ld,\"active\":%ld,\"payload\":%ld,\"posted\":%llu,"
           "\"expected\":%llu,\"delivered\":%llu,\"lost\":%llu,\"errors\":%llu,\"seconds\":%.6f,\"posting_seconds\":%.6f,"
           "\"delivered_per_s\":%.1f,\"posts_per_s\":%.1f,\"complete\":%s,\"window_waits\":%llu,\"poster_cpu_s\":%.4f}\n",
           opt.system, nslots, active, opt.payload, (unsigned long long)posted, (unsigned long long)expected,
           (unsigned long long)delivered, (unsigned long long)lost, (unsigned long long)errors, seconds,
           (double)(t_posted - t0) / 1e9, (double)delivered / seconds, (double)posted / seconds,
           complete ? "true" : "false", (unsigned long long)waits, (double)(cpu1 - cpu0) / 1e9);
    backend->close(c);
    return 0;
}

/* ---- flood: a poster with no flow control ----
 *
 * Posts `--posts` notifications (or as many as fit in `--max-seconds`) in batches of `--batch` per write,
 * as fast as the system takes the bytes: no window, no acknowledgements (the C client's flush only polls
 * for writability and reads what the system sends, so neither side can block the other). Then one more
 * post whose payload starts with END_MARK. Subscribers count what they receive and publish the time of
 * their last read; the run ends when every active subscriber has seen the end marker (or failed), when
 * nothing has arrived for `--quiet-seconds`, or after `--drain-seconds`. Throughput = notification frames
 * received (NOTIFICATION and NOTIFICATION_MERGED alike) / (the last subscriber's last read - first post). */
static int role_flood(void) {
    conn *c = open_or_die();
    backend->make_poster(c);
    backend->flush(c);
    uint8_t *payload = malloc((size_t)opt.payload + 1);
    memset(payload, 'x', (size_t)opt.payload);
    uint8_t *end_payload = malloc((size_t)opt.payload + 1);
    memset(end_payload, 'x', (size_t)opt.payload);
    end_payload[0] = END_MARK;
    size_t end_len = opt.payload > 0 ? (size_t)opt.payload : 1;
    long nslots = opt.subs;
    if (nslots > 256) die("flood: at most 256 subscribers");
    uint64_t deadline = now_ns() + 180ull * 1000000000ull;
    for (long i = 0; i < nslots; i++)
        while (!ld(&board->slots[i].ready)) {
            if (now_ns() > deadline) die("subscriber %ld never became ready", i);
            sleep_us(1000);
        }
    size_t name_len = strlen(opt.name);
    long active = nslots - (opt.ignore_slot >= 0 && opt.ignore_slot < nslots ? 1 : 0);
    uint64_t base[256] = {0};
    for (long i = 0; i < nslots; i++) base[i] = ld(&board->slots[i].received);
    uint64_t cpu0 = cpu_ns_self();
    uint64_t t0 = now_ns();
    uint64_t stop_at = t0 + (uint64_t)(opt.max_seconds * 1e9);
    uint64_t posted = 0, target = (uint64_t)opt.posts, max_lag = 0, batches = 0;
    int cut = 0;
    while (posted < target) {
        uint64_t batch = (uint64_t)opt.batch;
        if (batch > target - posted) batch = target - posted;
        for (uint64_t j = 0; j < batch; j++) backend->post(c, opt.name, name_len, payload, (size_t)opt.payload);
        posted += batch;
        if (backend->flush(c) < 0) die("flush failed while posting");
        if ((++batches & 15) == 0) {
            /* the backlog of the slowest active subscriber, in notifications (sampled every 16 writes) */
            uint64_t m = UINT64_MAX;
            for (long i = 0; i < nslots; i++) {
                if (i == opt.ignore_slot) continue;
                uint64_t r = ld(&board->slots[i].received) - base[i] + ld(&board->slots[i].merged);
                if (r < m) m = r;
            }
            if (m != UINT64_MAX && posted > m && posted - m > max_lag) max_lag = posted - m;
            if (now_ns() > stop_at) { cut = 1; break; }
        }
    }
    backend->post(c, opt.name, name_len, end_payload, end_len);
    posted++;
    if (backend->flush(c) < 0) die("flush failed while posting the end marker");
    uint64_t t_posted = now_ns();
    uint64_t cpu1 = cpu_ns_self();
    /* wait for the end marker everywhere (bounded: quiet period, drain deadline) */
    uint64_t drain_end = t_posted + (uint64_t)(opt.drain_seconds * 1e9);
    uint64_t quiet = (uint64_t)(opt.quiet_seconds * 1e9);
    uint64_t last_total = UINT64_MAX, last_change = now_ns();
    int complete = 0, quiet_end = 0, drain_cut = 0;
    for (;;) {
        int done = 1;
        uint64_t total = 0;
        for (long i = 0; i < nslots; i++) {
            if (i == opt.ignore_slot) continue;
            total += ld(&board->slots[i].received) + ld(&board->slots[i].merged);
            if (ld(&board->slots[i].ready) < 2 && !ld(&board->slots[i].errors)) done = 0;
        }
        uint64_t t = now_ns();
        if (done) { complete = 1; break; }
        if (total != last_total) { last_total = total; last_change = t; }
        if (t - last_change > quiet) { quiet_end = 1; break; }
        if (t > drain_end) { drain_cut = 1; break; }
        sleep_us(200);
    }
    uint64_t t_wait = now_ns();
    uint64_t delivered = 0, lost = 0, merged_frames = 0, dropped = 0, errors = 0, end_seen = 0, last = 0;
    uint64_t min_sub = UINT64_MAX, max_sub = 0;
    for (long i = 0; i < nslots; i++) {
        if (i == opt.ignore_slot) continue;
        uint64_t r = ld(&board->slots[i].received) - base[i];
        delivered += r;
        if (r < min_sub) min_sub = r;
        if (r > max_sub) max_sub = r;
        lost += ld(&board->slots[i].merged);
        merged_frames += ld(&board->slots[i].merged_frames);
        dropped += ld(&board->slots[i].dropped);
        errors += ld(&board->slots[i].errors);
        if (ld(&board->slots[i].ready) >= 2) end_seen++;
        uint64_t l = ld(&board->slots[i].last_ns);
        if (l > last) last = l;
    }
    st(&board->stop, 1);
    if (last < t0) last = t_wait;
    double seconds = (double)(last - t0) / 1e9;
    if (seconds <= 0) seconds = 1e-9;
    uint64_t expected = posted * (uint64_t)active;
    uint64_t merged = lost - dropped;
    uint64_t accounted = delivered + merged + dropped;
    printf("{\"role\":\"flood\",\"system\":\"%s\",\"policy\":\"%s\",\"subscribers\":%ld,\"active\":%ld,\"payload\":%ld,"
           "\"posted\":%llu,\"expected\":%llu,\"delivered\":%llu,\"merged_frames\":%llu,\"merged\":%llu,\"dropped\":%llu,"
           "\"unaccounted\":%llu,\"errors\":%llu,\"end_seen\":%llu,\"min_per_subscriber\":%llu,\"max_per_subscriber\":%llu,"
           "\"seconds\":%.6f,\"posting_seconds\":%.6f,\"delivered_per_s\":%.1f,\"posts_per_s\":%.1f,\"max_lag\":%llu,"
           "\"complete\":%s,\"quiet_end\":%s,\"drain_cut\":%s,\"posting_cut\":%s,\"poster_cpu_s\":%.4f}\n",
           opt.system, opt.policy ? opt.policy : "native", nslots, active, opt.payload, (unsigned long long)posted,
           (unsigned long long)expected, (unsigned long long)delivered, (unsigned long long)merged_frames,
           (unsigned long long)merged, (unsigned long long)dropped,
           (unsigned long long)(expected > accounted ? expected - accounted : 0), (unsigned long long)errors,
           (unsigned long long)end_seen, (unsigned long long)(min_sub == UINT64_MAX ? 0 : min_sub),
           (unsigned long long)max_sub, seconds, (double)(t_posted - t0) / 1e9, (double)delivered / seconds,
           (double)posted / ((double)(t_posted - t0) / 1e9), (unsigned long long)max_lag, complete ? "true" : "false",
           quiet_end ? "true" : "false", drain_cut ? "true" : "false", cut ? "true" : "false",
           (double)(cpu1 - cpu0) / 1e9);
    backend->close(c);
    return 0;
}

/* ---- ping / pong ---- */

struct pong_state { conn *pub; const char *reply; size_t reply_len; uint64_t count; };

static void answer_ping(void *arg, const char *name, size_t name_len, const uint8_t *payload, size_t payload_len, uint64_t lost) {
    (void)name_len; (void)lost;
    struct pong_state *s = arg;
    if (!name) return;
    backend->post(s->pub, s->reply, s->reply_len, payload, payload_len);
    backend->flush(s->pub);
    s->count++;
}

static int role_pong(void) {
    conn *sub = open_or_die(), *pub = open_or_die();
    backend->make_poster(pub);
    backend->flush(pub);
    char *names[1] = {"bench.ping"};
    subscribe_or_die(sub, names, 1, 0);
    st(&board->slots[opt.slot].ready, 1);
    struct pong_state s = {pub, "bench.pong", 10, 0};
    char err[512] = "";
    while (!ld(&board->stop)) {
        struct pollfd p = {backend->fd(sub), POLLIN, 0};
        if (poll(&p, 1, 20) <= 0) continue;
        if (backend->pump(sub, answer_ping, &s, err, sizeof err) < 0) die("pong: %s", err);
    }
    printf("{\"role\":\"pong\",\"answered\":%llu}\n", (unsigned long long)s.count);
    backend->close(sub);
    backend->close(pub);
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int role_ping(void) {
    conn *sub = open_or_die(), *pub = open_or_die();
    backend->make_poster(pub);
    backend->flush(pub);
    char *names[1] = {"bench.pong"};
    subscribe_or_die(sub, names, 1, 0);
    st(&board->slots[opt.slot].ready, 1);
    uint64_t deadline = now_ns() + 60ull * 1000000000ull;
    for (long i = 0; i < opt.slots; i++)
        while (!ld(&board->slots[i].ready)) {
            if (now_ns() > deadline) die("pong never became ready");
            sleep_us(1000);
        }
    uint8_t *payload = malloc((size_t)opt.payload + 1);
    memset(payload, 'p', (size_t)opt.payload);
    long total = opt.warmup + opt.iterations;
    uint64_t *samples = malloc((size_t)opt.iterations * sizeof *samples);
    long n = 0;
    struct sub_state s = {0, 0, 0, 0, 0};
    char err[512] = "";
    uint64_t start = now_ns();
    for (long i = 0; i < total; i++) {
        uint64_t want = s.received + 1;
        uint64_t t0 = now_ns();
        backend->post(pub, "bench.ping", 10, payload, (size_t)opt.payload);
        if (backend->flush(pub) < 0) die("ping: flush failed");
        while (s.received < want) {
            struct pollfd p = {backend->fd(sub), POLLIN, 0};
            int r = poll(&p, 1, 5000);
            if (r == 0) die("ping: no pong within 5 s (iteration %ld)", i);
            if (r < 0) continue;
            if (backend->pump(sub, count_note, &s, err, sizeof err) < 0) die("ping: %s", err);
        }
        uint64_t t1 = now_ns();
        if (i >= opt.warmup) samples[n++] = t1 - t0;
        if (now_ns() - start > (uint64_t)(opt.max_seconds * 1e9) && n >= 1000) break;
    }
    st(&board->stop, 1);
    qsort(samples, (size_t)n, sizeof *samples, cmp_u64);
    double sum = 0;
    for (long i = 0; i < n; i++) sum += (double)samples[i];
    printf("{\"role\":\"ping\",\"system\":\"%s\",\"payload\":%ld,\"samples\":%ld,\"p50_us\":%.2f,\"p99_us\":%.2f,"
           "\"p999_us\":%.2f,\"max_us\":%.2f,\"mean_us\":%.2f}\n",
           opt.system, opt.payload, n, percentile(samples, (size_t)n, 50) / 1e3, percentile(samples, (size_t)n, 99) / 1e3,
           percentile(samples, (size_t)n, 99.9) / 1e3, n ? samples[n - 1] / 1e3 : 0, n ? sum / (double)n / 1e3 : 0);
    backend->close(sub);
    backend->close(pub);
    return 0;
}

/* ---- idle connections ---- */

static int role_idle(void) {
    struct board_slot *slot = &board->slots[opt.slot];
    size_t n = (size_t)opt.connections;
    conn **cs = calloc(n, sizeof *cs);
    char err[512];
    size_t opened = 0;
    for (; opened < n; opened++) {
        cs[opened] = backend->open(opt.address, opt.client_name, err, sizeof err);
        if (!cs[opened]) { fprintf(stderr, "nbench idle: connection %zu: %s\n", opened, err); break; }
    }
    st(&slot->received, opened);
    st(&slot->ready, 1);
    while (ld(&slot->command) < 1 && !ld(&board->stop)) sleep_us(2000);
    size_t subscribed = 0;
    if (!ld(&board->stop)) {
        char **names = malloc((size_t)opt.subs_per_conn * sizeof *names);
        for (size_t i = 0; i < opened; i++) {
            for (long j = 0; j < opt.subs_per_conn; j++)
                if (asprintf(&names[j], "%s%ld.c%zu.n%ld", opt.name_prefix, opt.slot, i, j) < 0) abort();
            if (backend->subscribe(cs[i], names, (size_t)opt.subs_per_conn, 0, err, sizeof err) < 0) {
                fprintf(stderr, "nbench idle: subscribe on connection %zu: %s\n", i, err);
                break;
            }
            for (long j = 0; j < opt.subs_per_conn; j++) free(names[j]);
            subscribed += (size_t)opt.subs_per_conn;
        }
    }
    st(&slot->merged, subscribed);
    st(&slot->ready, 2);
    while (!ld(&board->stop)) sleep_us(5000);
    for (size_t i = 0; i < opened; i++) backend->close(cs[i]);
    printf("{\"role\":\"idle\",\"connections\":%zu,\"subscriptions\":%zu}\n", opened, subscribed);
    return opened == n ? 0 : 1;
}

/* ---- churn ---- */

static int role_churn(void) {
    uint64_t t0 = now_ns(), end = t0 + (uint64_t)(opt.seconds * 1e9);
    uint64_t cycles = 0;
    char err[512];
    char *names[1] = {"bench.churn"};
    bench_pipeline_hello = 1;
    while (now_ns() < end) {
        conn *c = backend->open(opt.address, opt.client_name, err, sizeof err);
        if (!c) die("churn: %s", err);
        subscribe_or_die(c, names, 1, 0);
        backend->close(c);
        cycles++;
    }
    double seconds = (double)(now_ns() - t0) / 1e9;
    printf("{\"role\":\"churn\",\"system\":\"%s\",\"cycles\":%llu,\"seconds\":%.3f,\"per_s\":%.1f}\n", opt.system,
           (unsigned long long)cycles, seconds, (double)cycles / seconds);
    return 0;
}

int main(int argc, char **argv) {
    static struct option longopts[] = {
        {"system", 1, 0, 's'}, {"address", 1, 0, 'a'}, {"board", 1, 0, 'b'}, {"slot", 1, 0, 1}, {"slots", 1, 0, 2},
        {"name", 1, 0, 3}, {"name-prefix", 1, 0, 4}, {"name-count", 1, 0, 5}, {"name-first", 1, 0, 6},
        {"name-last", 1, 0, 7}, {"patterns", 1, 0, 8}, {"posts", 1, 0, 9}, {"payload", 1, 0, 10}, {"window", 1, 0, 11},
        {"subs", 1, 0, 12}, {"ignore-slot", 1, 0, 13}, {"iterations", 1, 0, 14}, {"warmup", 1, 0, 15},
        {"connections", 1, 0, 16}, {"subs-per-conn", 1, 0, 17}, {"max-seconds", 1, 0, 18}, {"seconds", 1, 0, 19},
        {"spread", 0, 0, 20}, {"batch", 1, 0, 21}, {"client-name", 1, 0, 22}, {"pattern-first", 1, 0, 23},
        {"policy", 1, 0, 24}, {"drain-seconds", 1, 0, 25}, {"quiet-seconds", 1, 0, 26}, {0, 0, 0, 0},
    };
    if (argc < 2) die("usage: nbench sub|pub|flood|ping|pong|idle|churn --system S --address PATH [--board FILE] ...");
    opt.role = argv[1];
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 's': opt.system = optarg; break;
        case 'a': opt.address = optarg; break;
        case 'b': opt.board_path = optarg; break;
        case 1: opt.slot = atol(optarg); break;
        case 2: opt.slots = atol(optarg); break;
        case 3: opt.name = optarg; break;
        case 4: opt.name_prefix = optarg; break;
        case 5: opt.name_count = atol(optarg); break;
        case 6: opt.name_first = atol(optarg); break;
        case 7: opt.name_last = atol(optarg); break;
        case 8: opt.patterns = atol(optarg); break;
        case 9: opt.posts = atol(optarg); break;
        case 10: opt.payload = atol(optarg); break;
        case 11: opt.window = atol(optarg); break;
        case 12: opt.subs = atol(optarg); break;
        case 13: opt.ignore_slot = atol(optarg); break;
        case 14: opt.iterations = atol(optarg); break;
        case 15: opt.warmup = atol(optarg); break;
        case 16: opt.connections = atol(optarg); break;
        case 17: opt.subs_per_conn = atol(optarg); break;
        case 18: opt.max_seconds = atof(optarg); break;
        case 19: opt.seconds = atof(optarg); break;
        case 20: opt.spread = 1; break;
        case 21: opt.batch = atol(optarg); break;
        case 22: opt.client_name = optarg; break;
        case 23: opt.pattern_first = atol(optarg); break;
        case 24: opt.policy = optarg; parse_policy(optarg); break;
        case 25: opt.drain_seconds = atof(optarg); break;
        case 26: opt.quiet_seconds = atof(optarg); break;
        default: die("unknown option");
        }
    }
    if (!opt.system || !opt.address) die("--system and --address are required");
    signal(SIGPIPE, SIG_IGN);
    backend = pick_backend(opt.system);
    if (strcmp(opt.role, "churn") != 0) {
        if (!opt.board_path) die("--board is required for role %s", opt.role);
        long need = opt.slots > opt.subs ? opt.slots : opt.subs;
        if (opt.slot + 1 > need) need = opt.slot + 1;
        board = board_open(opt.board_path, (size_t)need);
    }
    if (!strcmp(opt.role, "sub")) return role_sub();
    if (!strcmp(opt.role, "pub")) return role_pub();
    if (!strcmp(opt.role, "flood")) return role_flood();
    if (!strcmp(opt.role, "ping")) return role_ping();
    if (!strcmp(opt.role, "pong")) return role_pong();
    if (!strcmp(opt.role, "idle")) return role_idle();
    if (!strcmp(opt.role, "churn")) return role_churn();
    die("unknown role %s", opt.role);
}
