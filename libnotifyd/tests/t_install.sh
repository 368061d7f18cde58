#!/bin/sh
# t_install: `make install` into a temporary PREFIX (and into a DESTDIR) lays out the shared library with
# its soname, the static library, both headers, libnotifyd.pc and the man pages; then a Darwin program
# (only <notify.h>) builds with `cc prog.c $(pkg-config --cflags --libs libnotifyd)` against the installed
# copy and runs against a daemon of its own. Uses a plain build (no sanitizer flags) in build/install-check.
set -eu
NOTIFYD=${NOTIFYD:-../.build/debug/notifyd}
NOTIFYCTL=${NOTIFYCTL:-../.build/debug/notifyctl}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/libnotifyd-install.XXXXXX")
daemon=
cleanup() {
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL t_install: $*" >&2; exit 1; }
[ -x "$NOTIFYD" ] && [ -x "$NOTIFYCTL" ] || fail "cannot run $NOTIFYD or $NOTIFYCTL: build them (swift build) or set NOTIFYD and NOTIFYCTL"

make -s install BUILD=build/install-check SAN= PREFIX="$tmp/prefix" >/dev/null
p="$tmp/prefix"
for f in lib/libnotifyd.so lib/libnotifyd.so.1 lib/libnotifyd.so.1.0.0 lib/libnotifyd.a include/notify.h \
         include/notifyd.h lib/pkgconfig/libnotifyd.pc share/man/man3/notify.3 \
         share/man/man3/notifyd_register_callback.3 share/man/man3/notify_post.3; do
    [ -e "$p/$f" ] || fail "missing $f"
done
readelf -d "$p/lib/libnotifyd.so.1.0.0" | grep -q 'SONAME.*\[libnotifyd.so.1\]' || fail "no soname libnotifyd.so.1"
readelf -d "$p/lib/libnotifyd.so.1.0.0" | grep NEEDED | grep -q -i dispatch && fail "libnotifyd.so needs libdispatch"

make -s install BUILD=build/install-check SAN= PREFIX=/usr DESTDIR="$tmp/dest" >/dev/null
[ -e "$tmp/dest/usr/lib/libnotifyd.so.1" ] && [ -e "$tmp/dest/usr/include/notify.h" ] || fail "DESTDIR layout"
grep -q '^prefix=/usr$' "$tmp/dest/usr/lib/pkgconfig/libnotifyd.pc" || fail "the .pc file names PREFIX, not DESTDIR"

export PKG_CONFIG_PATH="$p/lib/pkgconfig"
pkg-config --exists libnotifyd || fail "pkg-config does not find libnotifyd"
cc tests/darwin_prog.c $(pkg-config --cflags --libs libnotifyd) -o "$tmp/prog" || fail "the Darwin program does not build"
cc -static tests/darwin_prog.c $(pkg-config --cflags --static --libs libnotifyd) -o "$tmp/prog-static" 2>/dev/null \
    || cc tests/darwin_prog.c "$p/lib/libnotifyd.a" $(pkg-config --static --libs-only-other --libs-only-l libnotifyd | sed 's/-lnotifyd//') -o "$tmp/prog-static" \
    || fail "the Darwin program does not link statically"

sock="$tmp/notifyd.sock"
: > "$tmp/notifyd.conf"
"$NOTIFYD" --socket "$sock" --config "$tmp/notifyd.conf" --log stderr --log-level warning 2>"$tmp/notifyd.log" &
daemon=$!
i=0
until "$NOTIFYCTL" --socket "$sock" status >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -gt 400 ] && fail "the daemon did not start: $(cat "$tmp/notifyd.log")"
    kill -0 "$daemon" 2>/dev/null || fail "the daemon exited: $(cat "$tmp/notifyd.log")"
    sleep 0.05
done
NOTIFYD_SOCKET="$sock" LD_LIBRARY_PATH="$p/lib" timeout 60 "$tmp/prog" || fail "the Darwin program failed (exit $?)"
NOTIFYD_SOCKET="$sock" timeout 60 "$tmp/prog-static" || fail "the static Darwin program failed (exit $?)"
[ "$("$NOTIFYCTL" --socket "$sock" state get com.eg.update)" = 42 ] || fail "the program's state is not in the daemon"
echo ok
