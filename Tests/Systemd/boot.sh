#!/usr/bin/env bash
# The project's real-systemd harness: boots Debian with systemd as PID 1 (systemd-nspawn --boot) on a host that
# does not run systemd, installs notifyd inside exactly as `make install` does, runs Tests/Systemd/checks.sh
# there as root, and prints its PASS/FAIL lines and its closing "N passed, N failed" line. `make test-systemd`.
#
#   Tests/Systemd/boot.sh PRODUCTS_DIR
#
# PRODUCTS_DIR holds notifyd and notifyctl (and notify-test-peer); the checkout is bound read-only at /src.
# The Debian root file system is built once with mmdebstrap and cached outside the work tree in
# $NOTIFYD_SYSTEMD_CACHE (default /var/cache/notifyd-systemd-test); each run gets a fresh overlay over it.
# Exit status: the checks' (0 when all passed); 124 when the guest ran out of time; 125 when it gave no result.
set -euo pipefail

# Bump when the rootfs customisation below changes: it is part of the cache key.
ROOTFS_LAYOUT=2
PACKAGES="systemd systemd-sysv dbus libpam-systemd libnss-systemd libstdc++6 procps make python3"
SUITE=bookworm
TIMEOUT=${NOTIFYD_SYSTEMD_TIMEOUT:-600}

say() { echo "test-systemd: $*" >&2; }
fail() { say "$*"; exit 125; }

[ $# -eq 1 ] || { echo "usage: $0 PRODUCTS_DIR" >&2; exit 2; }
products=$(cd "$1" && pwd)
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || fail "must run as root (systemd-nspawn needs it)"
for program in notifyd notifyctl notify-test-peer; do
    [ -x "$products/$program" ] || fail "$products/$program is missing: build it first"
done

# ---- host tools ----------------------------------------------------------------------------------------------
missing=()
command -v systemd-nspawn >/dev/null 2>&1 || missing+=(systemd-container)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || fail "install ${missing[*]}"
    say "installing ${missing[*]}"
    # --no-install-recommends keeps libnss-mymachines out of the host's nsswitch.conf.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || fail "apt-get install ${missing[*]} failed"
fi

# ---- the cached root file system -----------------------------------------------------------------------------
cache=${NOTIFYD_SYSTEMD_CACHE:-/var/cache/notifyd-systemd-test}
mkdir -p "$cache"
key=$(printf '%s\n' "$ROOTFS_LAYOUT" "$SUITE" "$PACKAGES" | sha256sum | cut -c1-12)
rootfs="$cache/rootfs-$SUITE-$key"

build_rootfs() {
    local tmp="$rootfs.tmp.$$"
    rm -rf "$tmp"
    say "building the Debian $SUITE root file system once (cached in $rootfs)"
    local started=$SECONDS
    mmdebstrap --variant=minbase --include="${PACKAGES// /,}" "$SUITE" "$tmp" > "$cache/build.log" 2>&1 \
        || { tail -20 "$cache/build.log" >&2; fail "mmdebstrap failed (log: $cache/build.log)"; }
    echo notifyd-test > "$tmp/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 notifyd-test\n' > "$tmp/etc/hosts"
    : > "$tmp/etc/machine-id"      # empty: systemd sets one at each boot
    # Units that need the network or real disks only slow a container's boot down.
    for unit in systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
        e2scrub_reap.service e2scrub_all.timer fstrim.timer; do
        ln -sf /dev/null "$tmp/etc/systemd/system/$unit"
    done
    # A volatile journal with no rate limit: the checks read every line the daemon logged.
    mkdir -p "$tmp/etc/systemd/journald.conf.d"
    printf '[Journal]\nStorage=volatile\nRateLimitIntervalSec=0\n' > "$tmp/etc/systemd/journald.conf.d/test.conf"
    # The accounts of the checks: alice and bob, as a fresh machine's first users.
    chroot "$tmp" useradd -m -u 1000 -s /bin/bash alice
    chroot "$tmp" useradd -m -u 1001 -s /bin/bash bob
    mv "$tmp" "$rootfs"
    say "root file system built in $((SECONDS - started)) s"
}

exec 9> "$cache/.lock"
flock 9
[ -d "$rootfs" ] || build_rootfs
flock -u 9

# ---- this run ------------------------------------------------------------------------------------------------
run=$(mktemp -d "$cache/run.XXXXXX")
mkdir -p "$run/upper" "$run/work" "$run/guest" "$run/out"
machine="notifyd-test-$$"
mounted=0; cgroups=(); tail_pid=""
cleanup() {
    set +e
    [ -z "$tail_pid" ] || { kill "$tail_pid"; wait "$tail_pid"; } 2>/dev/null
    [ "$mounted" = 0 ] || umount "$run/guest" 2>/dev/null || umount -l "$run/guest"
    for cg in "${cgroups[@]}"; do [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null; done
    rm -rf "$cache/last"; cp -a "$run/out" "$cache/last" 2>/dev/null
    rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$run/upper,workdir=$run/work" "$run/guest" \
    && mounted=1 || fail "overlayfs is needed for a fresh layer per run"
guest="$run/guest"

# The binaries are linked against the toolchain's Swift runtime: copy the libraries the guest lacks, same paths.
for program in notifyd notifyctl notify-test-peer; do
    ldd "$products/$program" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
        [ -e "$guest$lib" ] && continue
        mkdir -p "$guest$(dirname "$lib")"; cp -L "$lib" "$guest$lib"
    done
done

# The checks run as a service once the boot is done; the guest powers off when they end.
mkdir -p "$guest/notifyd-test"
cat > "$guest/notifyd-test/run" <<'GUEST'
#!/bin/bash
cd /root
/src/Tests/Systemd/checks.sh /src /products > /out/output.log 2>&1 < /dev/null
echo $? > /out/rc.tmp
journalctl -b --no-pager -o short-monotonic > /out/journal.txt 2>&1
mv /out/rc.tmp /out/rc
GUEST
chmod 0755 "$guest/notifyd-test/run"
cat > "$guest/etc/systemd/system/notifyd-test.service" <<'UNIT'
[Unit]
Description=notifyd's checks under a real systemd
After=default.target
SuccessAction=poweroff
FailureAction=poweroff
[Service]
Type=exec
ExecStart=/notifyd-test/run
Environment=HOME=/root TERM=dumb SYSTEMD_PAGER=cat SYSTEMD_COLORS=0 LANG=C.UTF-8
[Install]
WantedBy=default.target
UNIT
mkdir -p "$guest/etc/systemd/system/default.target.wants"
ln -sf /etc/systemd/system/notifyd-test.service "$guest/etc/systemd/system/default.target.wants/"

# Host quirks. nspawn refuses to clean /run/systemd/nspawn up unless it is a tmpfs, which it is not on a host
# without systemd.
if [ "$(stat -f -c %T /run/systemd/nspawn 2>/dev/null || stat -f -c %T /run)" != tmpfs ]; then
    mkdir -p /run/systemd/nspawn
    mount -t tmpfs -o mode=0755,size=16m notifyd-test /run/systemd/nspawn
fi
args=(--quiet --boot --directory="$guest" --machine="$machine" --register=no --private-network
    --setenv=SYSTEMD_COLORS=0 --bind-ro="$source_dir:/src" --bind-ro="$products:/products" --bind="$run/out:/out")
if [ ! -d /run/systemd/system ]; then
    # No systemd on the host: give the guest a cgroup of its own in each systemd hierarchy, removed afterwards.
    args+=(--keep-unit)
    for hierarchy in /sys/fs/cgroup/unified /sys/fs/cgroup/systemd /sys/fs/cgroup; do
        if [ -w "$hierarchy/cgroup.procs" ]; then
            mkdir -p "$hierarchy/$machine" && cgroups+=("$hierarchy/$machine")
            [ "$hierarchy" = /sys/fs/cgroup ] && break
        fi
    done
fi
export SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1

kernel_since=$(awk '{ print $1 }' /proc/uptime)
: > "$run/out/output.log"
tail -n +1 -F "$run/out/output.log" 2>/dev/null &
tail_pid=$!
started=$SECONDS
set +e
(
    for cg in "${cgroups[@]}"; do echo "$BASHPID" > "$cg/cgroup.procs" 2>/dev/null; done
    exec timeout --kill-after=30 "$TIMEOUT" systemd-nspawn "${args[@]}" --console=read-only
) < /dev/null > "$run/out/console.log" 2>&1
nspawn_status=$?
set -e
sleep 0.3    # let tail print the last lines
kill "$tail_pid" 2>/dev/null; wait "$tail_pid" 2>/dev/null || true; tail_pid=""

# A seccomp kill is reported by the kernel (audit type=1326), never inside the guest.
dmesg 2>/dev/null | awk -v t="$kernel_since" '{ s = $0; sub(/^\[ */, "", s); sub(/\].*/, "", s); if (s + 0 > t + 0) print }' \
    | grep -E 'type=1326' > "$run/out/kernel-seccomp.log" || true
if grep -q 'comm="notifyd"' "$run/out/kernel-seccomp.log"; then
    echo "FAIL the kernel reported seccomp actions on notifyd (kernel-seccomp.log):"
    grep 'comm="notifyd"' "$run/out/kernel-seccomp.log" | head -5
    seccomp_failed=1
fi

if [ "$nspawn_status" = 124 ] || [ "$nspawn_status" = 137 ]; then
    say "the guest ran out of time after $TIMEOUT s; the console's last lines:"; tail -15 "$run/out/console.log" >&2
    exit 124
fi
[ -f "$run/out/rc" ] || { say "the guest gave no result (nspawn: $nspawn_status)"; tail -25 "$run/out/console.log" >&2; exit 125; }
say "booted, checked and powered off in $((SECONDS - started)) s (journal: $cache/last/journal.txt)"
status=$(cat "$run/out/rc")
[ "${seccomp_failed:-0}" = 0 ] || status=1
exit "$status"
