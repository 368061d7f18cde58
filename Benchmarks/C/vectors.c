/* vectors: checks the C client's decoder (notifyd_client.c) against the golden vectors of protocol/vectors:
 * every daemon-to-client vector must decode to exactly one frame using every byte; every invalid one must be
 * rejected. Client-to-daemon vectors are skipped (this client does not decode requests).
 *
 *   vectors DIR        prints "vectors: N passed, M failed" and exits non-zero on a failure */
#define _GNU_SOURCE
#include "notifyd_client.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c) { return isdigit(c) ? c - '0' : tolower(c) - 'a' + 10; }

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: vectors DIR\n"); return 2; }
    DIR *d = opendir(argv[1]);
    if (!d) { perror(argv[1]); return 2; }
    struct dirent *e;
    int passed = 0, failed = 0, skipped = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".hex")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) { failed++; continue; }
        uint8_t bytes[1 << 17];
        size_t n = 0;
        int daemon_to_client = 0, invalid = 0, nibble = -1;
        uint32_t max_frame = 131072;
        char line[8192];
        while (fgets(line, sizeof line, f)) {
            char *hash = strchr(line, '#');
            if (hash) {
                if (strstr(hash, "direction: daemon-to-client")) daemon_to_client = 1;
                if (strstr(hash, "expect-error:")) invalid = 1;
                char *m = strstr(hash, "max-frame-length:");
                if (m) max_frame = (uint32_t)strtoul(m + 17, NULL, 10);
                *hash = 0;
            }
            for (char *p = line; *p; p++) {
                if (!isxdigit((unsigned char)*p)) continue;
                if (nibble < 0) nibble = hexval(*p);
                else { if (n < sizeof bytes) bytes[n++] = (uint8_t)(nibble << 4 | hexval(*p)); nibble = -1; }
            }
        }
        fclose(f);
        if (!daemon_to_client) { skipped++; continue; }
        nd_client *c = nd_from_bytes(bytes, n, max_frame);
        struct nd_frame fr;
        int r = nd_next(c, &fr);
        int ok;
        if (invalid) ok = r < 0 || (r == 0 && nd_buffered(c) > 0) || nd_buffered(c) > 0; /* rejected, or cut short */
        else ok = r == 1 && nd_buffered(c) == 0;
        if (ok) passed++;
        else { failed++; fprintf(stderr, "vectors: %s: %s (%s)\n", e->d_name, invalid ? "accepted an invalid frame" : "rejected a valid frame", nd_error(c)); }
        nd_close(c);
    }
    closedir(d);
    printf("vectors: %d passed, %d failed (%d client-to-daemon vectors skipped)\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
