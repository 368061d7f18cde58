/* D-Bus broadcast signals through sd-bus (for dbus-broker and dbus-daemon). A notification name maps to an
 * object path ("bench.fan" -> "/bench/fan"); a subscription is a match rule on that path; a post is a signal
 * org.notifyd.Bench.N with the payload as an array of bytes. */
#ifdef HAVE_SDBUS
#include "backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#define BENCH_INTERFACE "org.notifyd.Bench"

struct conn {
    sd_bus *bus;
    note_fn fn;
    void *arg;
    size_t installed, install_failed;
    sd_bus_slot **slots;
    size_t nslots;
};

static void to_path(const char *name, size_t len, char *out, size_t cap) {
    size_t j = 0;
    out[j++] = '/';
    for (size_t i = 0; i < len && j + 1 < cap; i++) out[j++] = name[i] == '.' ? '/' : name[i];
    out[j] = 0;
}

static conn *db_open(const char *address, const char *client_name, char *err, size_t errlen) {
    (void)client_name;
    sd_bus *bus = NULL;
    char addr[600];
    snprintf(addr, sizeof addr, "unix:path=%s", address);
    int r = sd_bus_new(&bus);
    if (r >= 0) r = sd_bus_set_address(bus, addr);
    if (r >= 0) r = sd_bus_set_bus_client(bus, 1);
    if (r >= 0) r = sd_bus_start(bus);
    const char *unique = NULL;
    if (r >= 0) r = sd_bus_get_unique_name(bus, &unique); /* waits for the Hello reply */
    if (r < 0) {
        snprintf(err, errlen, "sd-bus connect %s: %s", address, strerror(-r));
        if (bus) sd_bus_unref(bus);
        return NULL;
    }
    conn *k = calloc(1, sizeof *k);
    k->bus = bus;
    return k;
}

static int on_signal(sd_bus_message *m, void *userdata, sd_bus_error *error) {
    (void)error;
    conn *k = userdata;
    const char *path = sd_bus_message_get_path(m);
    const void *data = NULL;
    size_t size = 0;
    if (sd_bus_message_read_array(m, 'y', &data, &size) < 0) return 0;
    if (k->fn && path) k->fn(k->arg, path, strlen(path), data, size, 0);
    return 0;
}

static int on_installed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
    (void)error;
    conn *k = userdata;
    if (sd_bus_message_is_method_error(m, NULL)) k->install_failed++;
    k->installed++;
    return 0;
}

static int db_subscribe(conn *k, char **names, size_t n, int patterns, char *err, size_t errlen) {
    if (patterns) { snprintf(err, errlen, "D-Bus match rules have no wildcard names"); return -1; }
    k->slots = realloc(k->slots, (k->nslots + n) * sizeof *k->slots);
    size_t target = k->installed + n;
    for (size_t i = 0; i < n; i++) {
        char path[512], rule[700];
        to_path(names[i], strlen(names[i]), path, sizeof path);
        snprintf(rule, sizeof rule, "type='signal',interface='" BENCH_INTERFACE "',path='%s'", path);
        int r = sd_bus_add_match_async(k->bus, &k->slots[k->nslots++], rule, on_signal, on_installed, k);
        if (r < 0) { snprintf(err, errlen, "sd_bus_add_match_async: %s", strerror(-r)); return -1; }
        /* keep the write queue short */
        if (i % 1000 == 999) sd_bus_flush(k->bus);
    }
    while (k->installed < target) {
        int r = sd_bus_process(k->bus, NULL);
        if (r < 0) { snprintf(err, errlen, "sd_bus_process: %s", strerror(-r)); return -1; }
        if (r == 0 && sd_bus_wait(k->bus, 10 * 1000000ull) < 0) { snprintf(err, errlen, "sd_bus_wait failed"); return -1; }
    }
    if (k->install_failed) { snprintf(err, errlen, "%zu match rules were refused", k->install_failed); return -1; }
    return 0;
}

static int db_make_poster(conn *k) { (void)k; return 0; }

static int db_post(conn *k, const char *name, size_t name_len, const void *payload, size_t payload_len) {
    char path[512];
    to_path(name, name_len, path, sizeof path);
    sd_bus_message *m = NULL;
    int r = sd_bus_message_new_signal(k->bus, &m, path, BENCH_INTERFACE, "N");
    if (r >= 0) r = sd_bus_message_append_array(m, 'y', payload, payload_len);
    if (r >= 0) r = sd_bus_send(k->bus, m, NULL);
    sd_bus_message_unref(m);
    return r < 0 ? -1 : 0;
}

static int db_flush(conn *k) { return sd_bus_flush(k->bus) < 0 ? -1 : 0; }
static int db_fd(conn *k) { return sd_bus_get_fd(k->bus); }

static int db_pump(conn *k, note_fn fn, void *arg, char *err, size_t errlen) {
    k->fn = fn;
    k->arg = arg;
    for (;;) {
        int r = sd_bus_process(k->bus, NULL);
        if (r < 0) { snprintf(err, errlen, "sd_bus_process: %s", strerror(-r)); return -1; }
        if (r == 0) return 0;
    }
}

static void db_close(conn *k) {
    if (!k) return;
    for (size_t i = 0; i < k->nslots; i++) sd_bus_slot_unref(k->slots[i]);
    free(k->slots);
    sd_bus_flush_close_unref(k->bus);
    free(k);
}

const struct backend dbus_backend = {
    .name = "dbus", .open = db_open, .subscribe = db_subscribe, .make_poster = db_make_poster, .post = db_post,
    .flush = db_flush, .fd = db_fd, .pump = db_pump, .close = db_close, .has_patterns = 0,
};
#endif
