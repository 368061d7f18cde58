/* t_concurrent: 100,000 register/cancel pairs from 4 threads at once (over 16 names, so subscriptions are
 * shared, created and dropped concurrently, and of every token kind), while a fifth thread posts. At the
 * end every token is gone, the daemon holds no subscription, and the process has no descriptor left over.
 * Meanwhile a sixth thread forks 50 times; each child posts and must not deadlock. CONCURRENT_OPS changes
 * the count. */
#define _GNU_SOURCE
#include "harness.h"
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
static long ops_per_thread;
static atomic_int running = THREADS, failures, forks;

static int count_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void on_note(int token, const notifyd_notification_t *n, void *ctx) {}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(long)arg;
    char name[64];
    int keep[8], nkeep = 0;
    for (long i = 0; i < ops_per_thread; i++) {
        snprintf(name, sizeof name, "org.test.concurrent.%u", rand_r(&seed) % 16);
        int t = -1, fd = -1;
        uint32_t st;
        switch (rand_r(&seed) % 4) {
        case 0: st = notify_register_check(name, &t); break;
        case 1: st = notify_register_file_descriptor(name, &fd, 0, &t); break;
        case 2: st = notify_register_signal(name, SIGURG, &t); break;
        default: st = notifyd_register_callback(name, &t, NULL, on_note, NULL, NULL); break;
        }
        if (st != NOTIFY_STATUS_OK) { fprintf(stderr, "register %s: %u\n", name, st); atomic_fetch_add(&failures, 1); continue; }
        /* Keep a few alive for a while, so that cancels also hit shared subscriptions. */
        if (nkeep < 8 && rand_r(&seed) % 2) { keep[nkeep++] = t; continue; }
        if (notify_cancel(t) != NOTIFY_STATUS_OK) atomic_fetch_add(&failures, 1);
        if (nkeep == 8 && rand_r(&seed) % 4 == 0) {
            while (nkeep > 0) if (notify_cancel(keep[--nkeep]) != NOTIFY_STATUS_OK) atomic_fetch_add(&failures, 1);
        }
    }
    while (nkeep > 0) if (notify_cancel(keep[--nkeep]) != NOTIFY_STATUS_OK) atomic_fetch_add(&failures, 1);
    atomic_fetch_sub(&running, 1);
    return NULL;
}

/* Forks while the other threads hold and contend for the library's locks: each child (which has none of
 * the parent's registrations) posts, waits for the daemon and exits; a deadlock in the child fails the
 * test through its deadline. */
static long fork_count = 50;
static void *forker(void *arg) {
    for (int i = 0; i < fork_count && atomic_load(&running) > 0; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            int t;
            if (notify_register_check("org.test.concurrent.child", &t) != NOTIFY_STATUS_OK) _exit(1);
            if (notify_post("org.test.concurrent.0") != NOTIFY_STATUS_OK) _exit(2);
            if (notifyd_sync(TIMEOUT_MS) != NOTIFY_STATUS_OK) _exit(3);
            /* exec rather than exit: buffers that other threads of the parent were filling at the fork
             * are unreachable in the child, and valgrind's leak check at exit would report them. */
            execl("/bin/true", "true", (char *)NULL);
            _exit(0);
        }
        if (pid < 0) { atomic_fetch_add(&failures, 1); continue; }
        atomic_fetch_add(&forks, 1);
        long end = h_now_ms() + TIMEOUT_MS;
        int status;
        while (waitpid(pid, &status, WNOHANG) != pid) {
            if (h_now_ms() > end) { kill(pid, SIGKILL); waitpid(pid, &status, 0); fprintf(stderr, "a forked child hung\n"); break; }
            usleep(1000); /* polling the child's exit; the deadline is what fails */
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { fprintf(stderr, "fork child: status %d\n", status); atomic_fetch_add(&failures, 1); }
    }
    return NULL;
}

static void *poster(void *arg) {
    char name[64];
    for (unsigned i = 0; atomic_load(&running) > 0; i++) {
        snprintf(name, sizeof name, "org.test.concurrent.%u", i % 16);
        /* With the ack, one post at a time: a poster that outruns the daemon would only queue the
         * other threads' requests behind its posts on the shared connection. */
        if (notifyd_post(name, NULL, 0, NOTIFYD_POST_ACK, NULL) != NOTIFY_STATUS_OK) atomic_fetch_add(&failures, 1);
    }
    return NULL;
}

int main(void) {
    const char *env = getenv("CONCURRENT_OPS");
    long total = env ? atol(env) : 100000;
    ops_per_thread = total / THREADS;
    /* FORKS=0 under AddressSanitizer: GCC 12's ASan does not hold its allocator's locks across fork, so a
     * child of a busy multi-threaded parent can hang inside malloc (seen: the child's reader thread stuck in
     * SizeClassAllocator64::GetFromAllocator). */
    if (getenv("FORKS")) fork_count = atol(getenv("FORKS"));
    h_start_daemon();
    signal(SIGURG, SIG_IGN);
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    int fds_before = count_fds();
    pthread_t th[THREADS + 2];
    long start = h_now_ms();
    for (long i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, (void *)(i + 1));
    pthread_create(&th[THREADS], NULL, poster, NULL);
    pthread_create(&th[THREADS + 1], NULL, forker, NULL);
    for (int i = 0; i <= THREADS + 1; i++) pthread_join(th[i], NULL);
    printf("%ld register/cancel pairs and %d forks in %ld ms\n", ops_per_thread * THREADS, atomic_load(&forks), h_now_ms() - start);
    CHECK(fork_count == 0 || atomic_load(&forks) > 0);
    CHECK(atomic_load(&failures) == 0, "%d calls failed", atomic_load(&failures));
    CHECK_OK(notifyd_sync(TIMEOUT_MS));
    CHECK(h_status("subscriptions") == 0, "the daemon still holds subscriptions");
    int probe;
    CHECK_OK(notify_register_check("org.test.concurrent.probe", &probe));
    for (int t = 0; t < probe; t++) CHECK(!notify_is_valid_token(t), "token %d is still valid", t);
    CHECK_OK(notify_cancel(probe));
    CHECK(count_fds() == fds_before, "descriptors: %d before, %d after", fds_before, count_fds());
    PASS();
}
