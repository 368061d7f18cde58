/* The C side of Tests/CrossLanguage/exchange.py, on libnotifyd.
 *
 *   c_peer NAME COUNT   registers a callback on NAME, prints "ready" once the daemon has the registration,
 *                       then posts what stdin asks ("post NAME PAYLOAD" lines, acknowledged) and prints
 *                       "recv PID NAME PAYLOAD" for each notification; exits 0 after COUNT of them.
 * The socket comes from $NOTIFYD_SOCKET, as for any libnotifyd program. */
#include <notify.h>
#include <notifyd.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int received;

static void on_notification(int token, const notifyd_notification_t *n, void *context) {
    (void)token;
    (void)context;
    pthread_mutex_lock(&lock);
    printf("recv %d %s %.*s\n", (int)n->sender.pid, n->name, (int)n->payload_length, (const char *)n->payload);
    fflush(stdout);
    received++;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

static void *read_commands(void *unused) {
    (void)unused;
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        char name[256], payload[256];
        if (sscanf(line, "post %255s %255s", name, payload) != 2) continue;
        uint32_t delivered = 0;
        uint32_t status = notifyd_post(name, payload, strlen(payload), NOTIFYD_POST_ACK, &delivered);
        if (status != NOTIFY_STATUS_OK) {
            fprintf(stderr, "c_peer: posting %s failed: %s\n", name, notifyd_status_string(status));
            exit(2);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: c_peer NAME COUNT\n");
        return 2;
    }
    int token, count = atoi(argv[2]);
    uint32_t status = notifyd_register_callback(argv[1], &token, NULL, on_notification, NULL, NULL);
    if (status == NOTIFY_STATUS_OK) status = notifyd_sync(20000);
    if (status != NOTIFY_STATUS_OK) {
        fprintf(stderr, "c_peer: registering %s failed: %s\n", argv[1], notifyd_status_string(status));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    pthread_t reader;
    pthread_create(&reader, NULL, read_commands, NULL);
    pthread_mutex_lock(&lock);
    while (received < count) pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    notify_cancel(token);
    return 0;
}
