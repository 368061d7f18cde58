#!/bin/bash
# The checks of `make test-systemd`, run as root inside a guest booted with systemd as PID 1 (Tests/Systemd/boot.sh).
# Installs notifyd as `make install` does, then checks the units, the daemon and the clients as a new user would
# meet them: root, alice (1000) and bob (1001). Prints one PASS/FAIL line per check and "N passed, N failed".
#
#   checks.sh SOURCE_DIR PRODUCTS_DIR
#
# Every wait polls a condition with a deadline and fails the check, loudly, when the deadline passes.
set -u
src=$1
products=$2
peer=$products/notify-test-peer
system_socket=/run/notifyd/notifyd.sock
work=$(mktemp -d /tmp/checks.XXXXXX)
chmod 0755 "$work"
passed=0
failed=0
LOAD_SECONDS=${LOAD_SECONDS:-60}

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() {
    echo "FAIL $1"
    shift
    [ $# -eq 0 ] || printf '%s\n' "$@" | sed 's/^/     /' | head -40
    failed=$((failed + 1))
}
# check DESCRIPTION COMMAND...: PASS when COMMAND exits 0; FAIL with its output otherwise.
check() {
    local description=$1 output
    shift
    if output=$("$@" 2>&1); then pass "$description"; else fail "$description" "$output"; fi
}
# wait_for SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds; fails after SECONDS.
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
contains() { grep -q -- "$2" "$1" 2>/dev/null; }
count_in() { grep -c -- "$2" "$1" 2>/dev/null || true; }
# as USER COMMAND...: runs COMMAND as USER (root too) with the system daemon's socket.
as() {
    local user=$1
    shift
    runuser -u "$user" -- env NOTIFYD_SOCKET=$system_socket "$@"
}
prop() { systemctl show -P "$2" "$1"; }
journal_since() { journalctl --no-pager -u notifyd.service --since "@$1" -o "${2:-cat}"; }
# listen_bg USER NAME TAG ARGS...: a `notifyctl listen` in the background, its output in $work/TAG.{out,err};
# returns once it is subscribed (it prints "listening for" on stderr then).
listen_bg() {
    local user=$1 name=$2 tag=$3
    shift 3
    as "$user" notifyctl listen "$name" "$@" > "$work/$tag.out" 2> "$work/$tag.err" &
    eval "pid_$tag=$!"
    wait_for 15 contains "$work/$tag.err" "listening for"
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}
trap 'pkill -P $$ 2>/dev/null' EXIT

echo "systemd $(systemctl --version | head -1 | cut -d' ' -f2) as PID 1 ($(cat /proc/1/comm)), $(. /etc/os-release; echo "$PRETTY_NAME")"

# ---- install, exactly as README says ------------------------------------------------------------------------
check "make install PRODUCTS=$products (as README: binaries, units, man pages)" \
    make -s -C "$src" install PRODUCTS="$products" PREFIX=/usr/local
check "systemctl daemon-reload && systemctl enable --now notifyd.socket" \
    sh -c 'systemctl daemon-reload && systemctl enable --now notifyd.socket'
[ -x /usr/local/bin/notifyctl ] || { fail "notifyctl installed"; finish; }

# ---- socket activation ----------------------------------------------------------------------------------------
check "notifyd.socket is listening and notifyd.service is not running before the first connection" \
    sh -c '[ "$(systemctl is-active notifyd.socket)" = active ] && [ "$(systemctl is-active notifyd.service)" = inactive ]'
check "the socket file has mode 0666" sh -c "[ \"\$(stat -c %a $system_socket)\" = 666 ]"
check "alice's first connection starts the daemon (notifyctl status as uid 1000)" as alice notifyctl status
check "the service is active (running) once READY=1 came (Type=notify)" \
    sh -c '[ "$(systemctl show -P ActiveState notifyd)" = active ] && [ "$(systemctl show -P SubState notifyd)" = running ]'
check "/run/notifyd is still a real directory once the daemon runs (0755, root), not a link into /run/private" \
    sh -c '[ -d /run/notifyd ] && [ ! -L /run/notifyd ] && [ "$(stat -c %a:%U /run/notifyd)" = 755:root ] && [ ! -e /run/private/notifyd ]'
check "the daemon runs as a dynamic user, not root" \
    sh -c 'pid=$(systemctl show -P MainPID notifyd); [ "$(stat -c %u /proc/$pid)" != 0 ]'
if wait_for 12 sh -c 'systemctl show -P StatusText notifyd | grep -q connections'; then
    pass "STATUS= reaches systemd: \"$(prop notifyd StatusText)\""
else
    fail "STATUS= reaches systemd" "StatusText: $(prop notifyd StatusText)"
fi
# nofile_ok PID: its open-file limit is LimitNOFILE=524288, soft and hard, or the most the manager may give
# (a container's systemd cannot raise its own hard limit: this one's is the host's).
nofile_ok() {
    local ceiling want
    ceiling=$(awk '/^Max open files/ {print $5}' /proc/1/limits)
    want=$(( ceiling < 524288 ? ceiling : 524288 ))
    grep -Eq "^Max open files +$want +$want " "/proc/$1/limits" || { grep "^Max open files" "/proc/$1/limits"; echo "wanted $want"; false; }
}
check "LimitNOFILE=524288 is in force for the daemon (soft = hard; the host caps a container): thousands of clients, not 1,024" \
    bash -c "$(declare -f nofile_ok); nofile_ok \$(systemctl show -P MainPID notifyd)"
check "WatchdogSec=10s is in force" sh -c '[ "$(systemctl show -P WatchdogUSec notifyd)" = 10s ]'

# ---- root, alice and bob, both ways ---------------------------------------------------------------------------
cross() {  # cross LISTENER POSTER EXPECTED_UID
    local name="com.example.cross.$1.$2" tag="cross_$1_$2"
    if ! listen_bg "$1" "$name" "$tag" --json --count 1 --timeout 15; then
        fail "$2 posts, $1 listens" "$(cat "$work/$tag.err")"; return
    fi
    local post_output
    post_output=$(as "$2" notifyctl post "$name" "from-$2" 2>&1) || { fail "$2 posts, $1 listens" "$post_output"; return; }
    wait "$(eval echo "\$pid_$tag")"
    if contains "$work/$tag.out" "\"uid\":$3" && contains "$work/$tag.out" "\"payload\":\"from-$2\""; then
        pass "$2 posts, $1 listens: delivered with uid $3"
    else
        fail "$2 posts, $1 listens: delivered with uid $3" "$(cat "$work/$tag.out" "$work/$tag.err")"
    fi
}
cross alice bob 1001
cross bob alice 1000
cross root alice 1000
cross alice root 0
cross bob root 0

# ---- access: user.<uid>. names and journal fields ----------------------------------------------------------------
since=$(date +%s)
if denied=$(as bob notifyctl post user.1000.secret x 2>&1); then
    fail "bob may not post under user.1000." "exit 0: $denied"
else
    case "$denied" in
    *"user.1000"*) pass "bob may not post under user.1000.: \"$denied\"" ;;
    *) fail "bob is refused with a message naming the rule" "$denied" ;;
    esac
fi
check "alice may post under user.1000." as alice notifyctl post user.1000.secret x
# bob_cannot_listen: exits 0 when bob's listen is refused (user names are private by default).
bob_cannot_listen() { ! as bob notifyctl listen user.1000.secret --count 1 --timeout 5 >/dev/null 2>&1; }
check "bob may not observe user.1000. names (private by default)" bob_cannot_listen
if wait_for 10 sh -c "journalctl -u notifyd --since @$since -o json | grep '\"PRIORITY\":\"5\"' | grep -q '\"UID\":\"1001\"'"; then
    line=$(journalctl -u notifyd --since "@$since" -o json | grep '"PRIORITY":"5"' | grep '"UID":"1001"' | head -1)
    ok=1
    for field in SYSLOG_IDENTIFIER CODE_FILE CODE_LINE CONNECTION PID MESSAGE; do
        case "$line" in *"\"$field\":"*) ;; *) ok=0; fail "the denial's journal entry has $field" "$line" ;; esac
    done
    [ "$ok" = 0 ] || pass "the denial is in the journal at notice (PRIORITY=5) with UID=1001, PID, CONNECTION, CODE_*"
else
    fail "the denial is in the journal at notice with UID=1001" "$(journal_since "$since" json | tail -5)"
fi
check "journalctl -u notifyd UID=1001 selects bob's entries" \
    sh -c "journalctl -u notifyd UID=1001 -o cat --since @$since | grep -q ."

# ---- notifyctl clients under ProtectProc=invisible ---------------------------------------------------------------
if listen_bg alice com.example.clients clients_listen --timeout 30; then
    clients=$(notifyctl clients 2>&1)
    # Alice's row (uid 1000, one subscription); the command comes first, then the client's own name in
    # parentheses: "? (notifyctl)" when nobody could read the command.
    row=$(echo "$clients" | awk '$2 == 1000 && $3 == 1')
    case "$row" in
    *" notifyctl (notifyctl)") pass "notifyctl clients names alice's notifyctl although the daemon cannot read /proc: $row" ;;
    *) fail "notifyctl clients names alice's notifyctl" "$clients" ;;
    esac
    kill "$pid_clients_listen" 2>/dev/null
else
    fail "a listener for notifyctl clients" "$(cat "$work/clients_listen.err")"
fi

# ---- reload -------------------------------------------------------------------------------------------------------
main_pid=$(prop notifyd MainPID)
since=$(date +%s)
listen_bg alice com.example.reload reload_listen --count 1 --timeout 30
check "systemctl reload notifyd with no configuration file succeeds" systemctl reload notifyd
if wait_for 10 sh -c "journalctl -u notifyd --since @$since -o cat | grep -q 'the defaults apply'"; then
    pass "the daemon reports the reload: no configuration file, the defaults apply"
else
    fail "the daemon reports the reload" "$(journal_since "$since" | tail -5)"
fi
check "the daemon is still running with the same pid after the reload" \
    sh -c "[ \"\$(systemctl show -P MainPID notifyd)\" = $main_pid ] && systemctl is-active -q notifyd"
as bob notifyctl post com.example.reload after-reload
if wait "$pid_reload_listen" && contains "$work/reload_listen.out" after-reload; then
    pass "a client connected before the reload still gets notifications"
else
    fail "a client connected before the reload still gets notifications" "$(cat "$work/reload_listen."*)"
fi
mkdir -p /etc/notifyd
echo 'reserve com.example.admin.> owner=root group=root post=owner observe=all' > /etc/notifyd/notifyd.conf
# refused_by_file: alice's post under com.example.admin is refused by the file's rule (not by a failed connection).
refused_by_file() {
    ! as alice notifyctl post com.example.admin.x 2> "$work/refused.err" && contains "$work/refused.err" "rule at /etc/notifyd/notifyd.conf:1"
}
check "systemctl reload notifyd with a new configuration file" systemctl reload notifyd
# systemctl reload is synchronous (ExecReload= is notifyctl reload): the rule applies as soon as it returns.
if refused_by_file; then
    pass "once systemctl reload has returned, the new file's rule applies: alice may not post under com.example.admin"
else
    fail "once systemctl reload has returned, the new file's rule applies" "$(cat "$work/refused.err")" \
        "$(journal_since "$since" | tail -5)"
fi
echo 'reserve com.example.admin.> post=sometimes' > /etc/notifyd/notifyd.conf
since=$(date +%s)
if systemctl reload notifyd 2> "$work/reload.err"; then
    fail "systemctl reload fails for a file that does not parse" "it succeeded"
elif journalctl -u notifyd --since "@$since" -o cat | grep -q "configuration not reloaded.*notifyd.conf:1" \
    && refused_by_file; then
    pass "systemctl reload fails for a file that does not parse, the journal says why, the previous rules stay"
else
    fail "a file that does not parse is reported and the previous rules stay" "$(cat "$work/reload.err")" \
        "$(journal_since "$since" | tail -5)"
fi
rm /etc/notifyd/notifyd.conf
systemctl reload notifyd
if as alice notifyctl post com.example.admin.x; then
    pass "removing the file and reloading brings the defaults back at once"
else
    fail "removing the file and reloading brings the defaults back at once"
fi
check "after four reloads the daemon still has the same pid" \
    sh -c "[ \"\$(systemctl show -P MainPID notifyd)\" = $main_pid ]"

# ---- 60 s under load, seccomp filter in kill mode ----------------------------------------------------------------
mkdir -p /run/systemd/system/notifyd.service.d
# An empty SystemCallErrorNumber= resets it to the default: the kernel kills the process on a filtered call.
printf '[Service]\nSystemCallErrorNumber=\n' > /run/systemd/system/notifyd.service.d/seccomp-kill.conf
systemctl daemon-reload
systemctl restart notifyd.service
wait_for 10 systemctl is-active -q notifyd
main_pid=$(prop notifyd MainPID)
since=$(date +%s)
restarts_before=$(prop notifyd NRestarts)
for user in root alice; do
    runuser -u "$user" -- "$peer" observe --socket $system_socket --name com.example.load \
        > "$work/load-$user.out" 2> "$work/load-$user.err" &
done
wait_for 15 sh -c "grep -q ready $work/load-root.out && grep -q ready $work/load-alice.out" \
    || fail "load observers subscribed" "$(cat "$work"/load-*.err)"
load_end=$((SECONDS + LOAD_SECONDS))
rounds=0
for user in alice bob; do
    ( while [ "$SECONDS" -lt "$load_end" ]; do
          runuser -u "$user" -- "$peer" post --socket $system_socket --name com.example.load --count 20000 \
              --prefix "$user-" >/dev/null 2>>"$work/load-post.err" || echo failed >> "$work/load-post.err"
      done ) &
done
while [ "$SECONDS" -lt "$load_end" ]; do
    as bob notifyctl status >/dev/null 2>>"$work/load-status.err" || echo "status failed" >> "$work/load-status.err"
    rounds=$((rounds + 1))
    sleep 1
done
wait_for 30 sh -c '! pgrep -f "notify-test-peer post" >/dev/null'
delivered=$(( $(wc -l < "$work/load-root.out") + $(wc -l < "$work/load-alice.out") - 2 ))
if [ "$(prop notifyd NRestarts)" = "$restarts_before" ] && [ "$(prop notifyd MainPID)" = "$main_pid" ] \
    && systemctl is-active -q notifyd && [ ! -s "$work/load-post.err" ] && [ ! -s "$work/load-status.err" ]; then
    pass "$LOAD_SECONDS s under load with the watchdog and the seccomp filter in kill mode: no restart, $delivered notifications delivered, $rounds status queries answered"
else
    fail "$LOAD_SECONDS s under load with the watchdog and the seccomp filter in kill mode" \
        "NRestarts $(prop notifyd NRestarts) (was $restarts_before), MainPID $(prop notifyd MainPID) (was $main_pid)" \
        "$(cat "$work/load-post.err" "$work/load-status.err" 2>/dev/null | head -5)" "$(journal_since "$since" | tail -10)"
fi
# errno=1 (EPERM) is the filter refusing setpriority; errno=13 (EACCES) is libdispatch asking for a higher priority
# than an unprivileged process may have, which any Swift program meets once per process and which changes nothing.
check "no SIGSYS, watchdog timeout or refused setpriority (EPERM) in the journal" \
    sh -c "! journalctl --since @$since -o cat | grep -E 'status=31/SYS|SIGSYS|Watchdog timeout|thread priority.*errno=1\$'"
pkill -f "notify-test-peer observe" 2>/dev/null
rm /run/systemd/system/notifyd.service.d/seccomp-kill.conf
systemctl daemon-reload

# ---- restart and stop with a listening client ----------------------------------------------------------------------
systemctl restart notifyd.service
wait_for 10 systemctl is-active -q notifyd
runuser -u alice -- "$peer" observe --socket $system_socket --name com.example.life \
    > "$work/life.out" 2> "$work/life.err" &
life_pid=$!
wait_for 15 contains "$work/life.out" ready || fail "the client-library observer subscribed" "$(cat "$work/life.err")"
# deliver_to_life TEXT: bob posts TEXT and the observer prints it (retried by wait_for while it reconnects).
deliver_to_life() {
    as bob notifyctl post com.example.life "$1" >/dev/null 2>&1 && wait_for 2 contains "$work/life.out" " $1\$"
}
instance() { as bob notifyctl status --json | sed -n 's/.*"instance_id" *: *"\([0-9a-f]*\)".*/\1/p'; }
main_pid=$(prop notifyd MainPID)
instance_before=$(instance)
since=$(date +%s)
# An upgrade: a new binary is installed over the running one, then the unit restarts.
cp /usr/local/bin/notifyd /usr/local/bin/notifyd.new && mv -f /usr/local/bin/notifyd.new /usr/local/bin/notifyd
systemctl restart notifyd.service
if wait_for 20 sh -c "[ \"\$(systemctl show -P MainPID notifyd)\" != $main_pid ] && systemctl is-active -q notifyd" \
    && wait_for 10 deliver_to_life after-restart && ! grep -qE 'disconnected|shutting down' "$work/life.err" \
    && [ "$(instance)" = "$instance_before" ] && journal_since "$since" | grep -q "handed over" \
    && journal_since "$since" | grep -q "took over from the previous daemon"; then
    pass "systemctl restart (after installing a new binary): the connections go to the new process through the fd store; the client stays connected and gets the next post, same instance"
else
    fail "systemctl restart hands the connections over" "$(cat "$work/life.err")" "instance $instance_before -> $(instance)" \
        "$(journal_since "$since" | tail -15)"
fi
check "after the hand-over the fd store is empty again (FDSTOREREMOVE=1)" \
    sh -c '[ "$(systemctl show -P NFileDescriptorStore notifyd)" = 0 ]'
# Issue 16's target under load: GAP_CLIENTS connections with 10 subscriptions each (every policy, exact names and
# patterns), suspended and SIGSTOPped ones among them, a poster at GAP_RATE posts/s throughout `systemctl restart`.
# restart_gap.py checks every tick on every connection byte for byte, and the QUERY tables before and after.
GAP_CLIENTS=${GAP_CLIENTS:-1000}
GAP_RATE=${GAP_RATE:-1000}
since=$(date +%s)
if python3 "$src/Benchmarks/restart_gap.py" --socket $system_socket --restart-command "systemctl restart notifyd.service" \
    --clients "$GAP_CLIENTS" --rate "$GAP_RATE" > "$work/gap.out" 2>&1; then
    pass "systemctl restart under load ($GAP_CLIENTS clients, $GAP_RATE posts/s): no EOF or GOODBYE, every post once and in order on every connection, tables equal; $(grep -o 'around the restart: p50.*' "$work/gap.out" | head -1)"
else
    fail "systemctl restart under load ($GAP_CLIENTS clients, $GAP_RATE posts/s)" "$(tail -12 "$work/gap.out")" \
        "$(journal_since "$since" | tail -8)"
fi
check "after the restart under load the fd store is empty again" \
    sh -c '[ "$(systemctl show -P NFileDescriptorStore notifyd)" = 0 ]'
since=$(date +%s)
systemctl stop notifyd.service
if wait_for 20 sh -c "[ \$(grep -c 'shutting down' $work/life.err) -ge 1 ] && [ \$(grep -c resubscribed $work/life.err) -ge 1 ]" \
    && systemctl is-active -q notifyd.socket && wait_for 10 deliver_to_life after-stop \
    && journal_since "$since" | grep -q "stopping (not a restart)"; then
    pass "systemctl stop: GOODBYE (no hand-over: the ExecStop= announcement said stop), and the client's reconnection starts the daemon again through the socket"
else
    fail "systemctl stop with a listening client" "$(cat "$work/life.err")" "service: $(systemctl is-active notifyd)"
fi

# ---- a stuck daemon: kill -STOP, the watchdog restarts it ---------------------------------------------------------
main_pid=$(prop notifyd MainPID)
restarts_before=$(prop notifyd NRestarts)
since=$(date +%s)
[ "$main_pid" -gt 0 ] && kill -STOP "$main_pid"
if wait_for 45 sh -c "[ \"\$(systemctl show -P NRestarts notifyd)\" -gt $restarts_before ] && [ \"\$(systemctl show -P MainPID notifyd)\" != $main_pid ] && [ \"\$(systemctl show -P MainPID notifyd)\" != 0 ] && systemctl is-active -q notifyd"; then
    pass "kill -STOP: systemd's watchdog restarted the daemon (NRestarts $restarts_before -> $(prop notifyd NRestarts))"
else
    fail "kill -STOP: the watchdog restarts the daemon" "$(journal_since "$since" | tail -10)"
fi
check "the journal says why: a watchdog timeout" \
    sh -c "journalctl --since @$since -o cat | grep -q 'Watchdog timeout'"
# The restart above handed the connection over, so the stop was the first reconnection, the watchdog the second.
if wait_for 20 sh -c "[ \$(grep -c resubscribed $work/life.err) -ge 2 ]" && wait_for 10 deliver_to_life after-watchdog; then
    pass "the client reconnects to the restarted daemon and gets the next post"
else
    fail "the client reconnects after the watchdog restart" "$(cat "$work/life.err")"
fi

# ---- stopping the socket and the service ----------------------------------------------------------------------------
kill "$life_pid" 2>/dev/null
check "systemctl stop notifyd.socket notifyd.service removes the socket file" \
    sh -c "systemctl stop notifyd.socket notifyd.service && [ ! -e $system_socket ] && ! systemctl is-active -q notifyd"
systemctl start notifyd.socket

# ---- the sandbox ---------------------------------------------------------------------------------------------------------
exposure=$(systemd-analyze security notifyd.service 2>/dev/null | sed -n 's/.*Overall exposure level for notifyd.service: \([0-9.]*\) \([A-Z]*\).*/\1 \2/p')
documented=$(sed -n 's/.*rates this \([0-9.]*\) "\([A-Z]*\)".*/\1 \2/p' /usr/local/lib/systemd/system/notifyd.service)
if [ -n "$exposure" ] && [ "$exposure" = "$documented" ]; then
    pass "systemd-analyze security notifyd.service: $exposure, as the unit and README say"
else
    fail "systemd-analyze security notifyd.service matches the documented rating" "measured: $exposure; documented: $documented"
fi

# ---- the user instance for alice ----------------------------------------------------------------------------------------
loginctl enable-linger alice
alice_env=(env XDG_RUNTIME_DIR=/run/user/1000)
as_alice() { runuser -u alice -- "${alice_env[@]}" "$@"; }
if wait_for 20 sh -c '[ "$(systemctl show -P ActiveState user@1000.service)" = active ] && [ -S /run/user/1000/systemd/private ]'; then
    pass "loginctl enable-linger alice starts her user manager"
else
    fail "alice's user manager starts" "$(systemctl status user@1000.service 2>&1 | tail -5)"
fi
check "systemctl --user enable --now notifyd.socket (alice)" as_alice systemctl --user enable --now notifyd.socket
check "alice's notifyctl finds her own daemon by default and starts it (socket mode 0600)" \
    sh -c 'runuser -u alice -- env XDG_RUNTIME_DIR=/run/user/1000 notifyctl status >/dev/null && [ "$(stat -c %a /run/user/1000/notifyd/notifyd.sock)" = 600 ]'
check "alice's notifyd.service runs under her user manager" \
    sh -c "[ \"\$(runuser -u alice -- ${alice_env[*]} systemctl --user show -P SubState notifyd.service)\" = running ]"
user_pid=$(as_alice systemctl --user show -P MainPID notifyd.service)
check "alice's daemon has the same open-file limit" bash -c "$(declare -f nofile_ok); nofile_ok $user_pid"
check "systemctl --user reload notifyd (alice, no configuration file)" as_alice systemctl --user reload notifyd
as_alice notifyctl listen com.example.user --count 1 --timeout 15 > "$work/user.out" 2> "$work/user.err" &
user_listen=$!
if wait_for 15 contains "$work/user.err" "listening for" && as_alice notifyctl post com.example.user mine \
    && wait "$user_listen" && contains "$work/user.out" mine; then
    pass "alice posts and listens on her own daemon"
else
    fail "alice posts and listens on her own daemon" "$(cat "$work/user.out" "$work/user.err")"
fi
check "alice's daemon kept its pid through the reload" \
    sh -c "[ \"\$(runuser -u alice -- ${alice_env[*]} systemctl --user show -P MainPID notifyd.service)\" = $user_pid ]"
# A restart of the user instance hands alice's connections over too (its ExecStop= asks her manager).
as_alice "$peer" observe --socket /run/user/1000/notifyd/notifyd.sock \
    --name com.example.userlife > "$work/userlife.out" 2> "$work/userlife.err" &
userlife_pid=$!
wait_for 15 contains "$work/userlife.out" ready || fail "alice's observer subscribed on her daemon" "$(cat "$work/userlife.err")"
deliver_to_userlife() {
    as_alice notifyctl post com.example.userlife "$1" >/dev/null 2>&1 && wait_for 2 contains "$work/userlife.out" " $1\$"
}
user_instance() { as_alice notifyctl status --json | sed -n 's/.*"instance_id" *: *"\([0-9a-f]*\)".*/\1/p'; }
user_instance_before=$(user_instance)
as_alice systemctl --user restart notifyd.service
if wait_for 20 sh -c "[ \"\$(runuser -u alice -- ${alice_env[*]} systemctl --user show -P MainPID notifyd.service)\" != $user_pid ]" \
    && wait_for 10 deliver_to_userlife after-user-restart && ! grep -qE 'disconnected|shutting down' "$work/userlife.err" \
    && [ -n "$user_instance_before" ] && [ "$(user_instance)" = "$user_instance_before" ]; then
    pass "systemctl --user restart notifyd (alice): her connections go to the new process, same instance; the client stays connected"
else
    fail "systemctl --user restart hands alice's connections over" "$(cat "$work/userlife.err" "$work/userlife.out")" \
        "instance $user_instance_before -> $(user_instance)"
fi
kill "$userlife_pid" 2>/dev/null || true
if out=$(runuser -u bob -- env NOTIFYD_SOCKET=/run/user/1000/notifyd/notifyd.sock notifyctl status 2>&1); then
    fail "bob cannot reach alice's daemon" "$out"
else
    pass "bob cannot reach alice's daemon: $out"
fi
check "no capability or start-limit failure of the user units" \
    sh -c "! journalctl --user-unit notifyd.service --user-unit notifyd.socket -o cat | grep -E '218/CAPABILITIES|start-limit-hit|Failed to drop capabilities'"

finish
