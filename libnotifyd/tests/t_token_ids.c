/* t_token_ids: token ids count up from 0; after INT_MAX they start again from 0 and skip every id still in
 * use (registered, or being registered), so an id never names two live tokens. The counter is moved next to
 * INT_MAX through the library's internals (linked from the static archive) rather than by 2^31
 * registrations. No daemon: "self." names only. */
#define _GNU_SOURCE
#include "harness.h"
#include "../src/internal.h"
#include <limits.h>

int main(void) {
    setenv("NOTIFYD_SOCKET", "/nonexistent/notifyd.sock", 1);
    int a, b, c, d, e, f, chk;
    CHECK_OK(notify_register_check("self.ids.a", &a));
    CHECK_OK(notify_register_check("self.ids.b", &b));
    CHECK(a == 0 && b == 1, "ids %d %d", a, b);

    LOCK();
    g.next_token = INT_MAX - 1;
    UNLOCK();
    CHECK_OK(notify_register_check("self.ids.c", &c));
    CHECK_OK(notify_register_check("self.ids.d", &d));
    CHECK(c == INT_MAX - 1 && d == INT_MAX, "ids %d %d", c, d);
    /* Past INT_MAX: 0 and 1 are still a and b. */
    CHECK_OK(notify_register_check("self.ids.e", &e));
    CHECK_OK(notify_register_check("self.ids.f", &f));
    CHECK(e == 2 && f == 3, "after the wrap: ids %d %d (a %d, b %d)", e, f, a, b);

    /* Every token is itself: a post reaches its own token only. */
    int toks[] = {a, b, c, d, e, f};
    const char *names[] = {"self.ids.a", "self.ids.b", "self.ids.c", "self.ids.d", "self.ids.e", "self.ids.f"};
    for (int i = 0; i < 6; i++) { CHECK_OK(notify_check(toks[i], &chk)); CHECK(chk == 1); }
    for (int i = 0; i < 6; i++) {
        CHECK_OK(notify_post(names[i]));
        for (int k = 0; k < 6; k++) {
            CHECK_OK(notify_check(toks[k], &chk));
            CHECK(chk == (k == i), "post of %s: token %d check %d", names[i], toks[k], chk);
        }
    }

    /* An id that is free again may be given out again, one still in use never. */
    CHECK_OK(notify_cancel(a));
    LOCK();
    g.next_token = INT_MAX;
    UNLOCK();
    int g1, g2;
    CHECK_OK(notify_register_check("self.ids.g1", &g1));
    CHECK_OK(notify_register_check("self.ids.g2", &g2));
    CHECK(g1 == 0 && g2 == 4, "ids %d %d (INT_MAX is d's, 0 was a's)", g1, g2);
    int all[] = {b, c, d, e, f, g1, g2};
    for (int i = 0; i < 7; i++) { CHECK(notify_is_valid_token(all[i])); CHECK_OK(notify_cancel(all[i])); }
    PASS();
}
