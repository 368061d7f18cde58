/* t_names: the pieces below the API, checked without a daemon: the name and pattern grammar of
 * PROTOCOL.md 8 (its tables of valid and invalid names and patterns), pattern matching (8.1), the frame
 * encoders against the golden vectors of protocol/vectors (byte for byte), and the decoder against every
 * daemon-to-client vector, valid ones accepted and invalid ones rejected. Links the library's internals
 * from the static archive. */
#define _GNU_SOURCE
#include "harness.h"
#include "../src/names.h"
#include "../src/wire.h"
#include <ctype.h>
#include <dirent.h>
#include <string.h>

static const char *vectors_dir(void) {
    const char *v = getenv("VECTORS");
    return v && *v ? v : "../protocol/vectors";
}

/* Reads a .hex vector: its bytes, its direction and its expect-error (empty if valid). */
static size_t load(const char *file, uint8_t *out, size_t cap, char *direction, char *expect, uint32_t *max_frame) {
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/%s", vectors_dir(), file);
    FILE *f = fopen(path, "r");
    if (!f) FAIL("cannot open %s", path);
    size_t n = 0;
    direction[0] = expect[0] = 0;
    *max_frame = 131072;
    int hi = -1;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) {
            char *m = hash + 1;
            while (*m == ' ') m++;
            if (sscanf(m, "direction: %63s", direction) == 1) {}
            else if (sscanf(m, "expect-error: %63s", expect) == 1) {}
            else if (sscanf(m, "max-frame-length: %u", max_frame) == 1) {}
            *hash = 0;
        }
        for (char *p = line; *p; p++) {
            if (!isxdigit((unsigned char)*p)) continue;
            int v = isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10);
            if (hi < 0) hi = v;
            else { CHECK(n < cap); out[n++] = (uint8_t)(hi << 4 | v); hi = -1; }
        }
    }
    fclose(f);
    CHECK(hi < 0, "odd number of hex digits in %s", file);
    return n;
}

/* 0 if the whole stream is well-formed daemon-to-client frames, -1 at the first error. */
static int decode_stream(const uint8_t *b, size_t n, uint32_t max_frame, int *frames) {
    size_t pos = 0;
    *frames = 0;
    while (pos < n) {
        uint32_t flen = 0;
        int whole = w_split(b + pos, n - pos, max_frame, &flen);
        if (whole <= 0) return -1; /* bad length, or the stream ends inside a frame */
        struct frame f;
        if (w_decode(b + pos + 4, flen, &f) < 0) return -1;
        (*frames)++;
        pos += 4 + flen;
    }
    return 0;
}

static void expect_bytes(const char *file, const struct wbuf *b) {
    uint8_t want[4096];
    char dir[64], exp[64];
    uint32_t mf;
    size_t n = load(file, want, sizeof want, dir, exp, &mf);
    CHECK(b->len == n && memcmp(b->data, want, n) == 0, "encoding of %s (%zu bytes, want %zu)", file, b->len, n);
}

int main(void) {
    /* 8: valid names. */
    const char *valid[] = {"org.example.battery.low", "a", "128", "user.uid.1000.inbox", "user.1000.inbox",
                           "app:ui@main+v2=1", "my-app_2.state", "de.beispiel.gr\xc3\xb6\xc3\x9f" "e",
                           "\xe6\x97\xa5\xe6\x9c\xac.\xe6\x9d\xb1\xe4\xba\xac", "status.\xf0\x9f\x98\x80", "self.cache.flush"};
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++) CHECK(name_valid(valid[i], 255, 0), "%s is valid", valid[i]);
    char a255[257];
    memset(a255, 'a', 256);
    a255[255] = 0;
    CHECK(name_valid(a255, 255, 0));
    a255[255] = 'a'; a255[256] = 0;
    CHECK(!name_valid(a255, 255, 0), "256 bytes");
    const char *invalid[] = {"", ".org.example", "org.example.", "org..example", "org.example.battery low", "org/example",
                             "org.example.*", "org.>", "tab\tname", "del\x7f", "c1\xc2\x85", "a\xc2\xa0" "b",
                             "a\xe2\x80\x8b" "b", "a\xe2\x80\xae" "b", "a\xef\xbb\xbf" "b", "\xc0\xae", "\xed\xa0\x80",
                             "x\xef\xbf\xbe", "x\xf0\x9f\xbf\xbe", "x!", "x#y"};
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++)
        CHECK(!name_valid(invalid[i], 255, 0), "name %zu (%s) is invalid", i, invalid[i]);
    CHECK(!name_valid("abcdef", 5, 0), "longer than the daemon's max_name_length");
    CHECK(name_is_self("self.x") && !name_is_self("self") && !name_is_self("Self.x") && !name_is_self("myself.x"));

    /* 8.1: patterns. */
    const char *vp[] = {"org.example.>", "org.*.>", "a.*.c", "*", ">", "\xe6\x97\xa5\xe6\x9c\xac.*", "org.example.battery.low"};
    for (size_t i = 0; i < sizeof vp / sizeof *vp; i++) CHECK(name_valid(vp[i], 255, 1), "pattern %s", vp[i]);
    const char *ip[] = {"org.>.x", ">.a", ">.>", "org.ex*", "org.**", "org.>>", "org.a>", "org..*", ".>", "org.*.", ""};
    for (size_t i = 0; i < sizeof ip / sizeof *ip; i++) CHECK(!name_valid(ip[i], 255, 1), "pattern %s is invalid", ip[i]);
    struct { const char *p, *n; int m; } cases[] = {
        {"org.example.battery.low", "org.example.battery.low", 1}, {"org.example.battery.low", "org.example.battery", 0},
        {"org.example.battery.low", "org.example.battery.low.x", 0}, {"org.*.x", "org.a.x", 1}, {"org.*.x", "org.x", 0},
        {"org.*.x", "org.a.b.x", 0}, {"org.*.x", "org.a.x.y", 0}, {"org.*.x", "net.a.x", 0}, {"org.*", "org.a", 1},
        {"org.*", "org", 0}, {"org.*", "org.a.b", 0}, {"org.>", "org.a", 1}, {"org.>", "org.a.b.c", 1}, {"org.>", "org", 0},
        {"org.>", "orgx.a", 0}, {"org.>", "x.org.a", 0}, {"*", "a", 1}, {"*", "a.b", 0}, {"*.*", "a.b", 1}, {"*.*", "a", 0},
        {"*.*", "a.b.c", 0}, {">", "a.b.c", 1}, {"*.>", "a.b", 1}, {"*.>", "a", 0}, {"a.*.c.>", "a.b.c.d", 1},
        {"a.*.c.>", "a.x.c.d.e", 1}, {"a.*.c.>", "a.b.c", 0}, {"a.*.c.>", "a.b.x.d", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK(name_matches(cases[i].p, cases[i].n) == cases[i].m, "%s vs %s", cases[i].p, cases[i].n);

    /* Encoders against the golden vectors. */
    struct wbuf b = {0};
    w_hello(&b, "notifyctl"); expect_bytes("hello.hex", &b); wbuf_free(&b);
    w_subscribe(&b, 1, 7, 0, 0, 0, "org.example.battery.low"); expect_bytes("subscribe.hex", &b); wbuf_free(&b);
    w_subscribe(&b, 4, 9, 1, 1, 100, "org.example.>"); expect_bytes("subscribe-pattern-queue.hex", &b); wbuf_free(&b);
    w_unsubscribe(&b, 3, 8); expect_bytes("unsubscribe.hex", &b); wbuf_free(&b);
    w_post(&b, 5, 0, "org.example.session.locked", NULL, 0); expect_bytes("post.hex", &b); wbuf_free(&b);
    w_post(&b, 2, 1, "org.example.battery.low", "{\"level\":17}", 12); expect_bytes("post-ack.hex", &b); wbuf_free(&b);
    w_post(&b, 10, 2, "org.example.battery.low", "{\"level\":17}", 12); expect_bytes("post-retain.hex", &b); wbuf_free(&b);
    w_simple(&b, FT_PING, 9); expect_bytes("ping.hex", &b); wbuf_free(&b);
    w_simple(&b, FT_SUSPEND, 14); expect_bytes("suspend.hex", &b); wbuf_free(&b);
    w_simple(&b, FT_RESUME, 15); expect_bytes("resume.hex", &b); wbuf_free(&b);
    w_set_state(&b, 11, 4294967338ull, "org.example.battery.level"); expect_bytes("set-state.hex", &b); wbuf_free(&b);
    w_get_state(&b, 12, "org.example.battery.level"); expect_bytes("get-state.hex", &b); wbuf_free(&b);
    w_query(&b, 16, 2, "org.example.>"); expect_bytes("query.hex", &b); wbuf_free(&b);

    /* The decoder against every daemon-to-client vector. */
    DIR *d = opendir(vectors_dir());
    CHECK(d, "no vectors at %s (set VECTORS)", vectors_dir());
    int checked = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".hex") != 0) continue;
        static uint8_t bytes[1 << 20];
        char dir[64], exp[64];
        uint32_t mf;
        size_t n = load(e->d_name, bytes, sizeof bytes, dir, exp, &mf);
        if (strcmp(dir, "daemon-to-client") != 0) {
            /* A client must refuse client-to-daemon types from the daemon. */
            if (strncmp(e->d_name, "invalid-", 8) != 0 && n > 4) {
                int frames;
                CHECK(decode_stream(bytes, n, mf, &frames) < 0, "%s: a client-to-daemon frame is not accepted", e->d_name);
            }
            continue;
        }
        int frames;
        int r = decode_stream(bytes, n, mf, &frames);
        if (exp[0]) CHECK(r < 0, "%s must be rejected (%s)", e->d_name, exp);
        else CHECK(r == 0 && frames >= 1, "%s must be accepted", e->d_name);
        checked++;
    }
    closedir(d);
    CHECK(checked >= 15, "only %d daemon-to-client vectors found", checked);
    printf("%d daemon-to-client vectors\n", checked);
    PASS();
}
