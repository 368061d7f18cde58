#!/bin/sh
# Runs the named tests (binaries in $BUILD/tests, "install" is t_install.sh), each with its own daemon,
# under $WRAP (e.g. valgrind), and prints one line per test and "N passed, N failed".
BUILD=${BUILD:-build}
pass=0 fail=0 failed=""
for t in "$@"; do
    start=$(date +%s.%N)
    if [ "$t" = install ]; then
        sh tests/t_install.sh >"$BUILD/tests/$t.log" 2>&1
    else
        timeout 900 $WRAP "$BUILD/tests/$t" >"$BUILD/tests/$t.log" 2>&1
    fi
    rc=$?
    secs=$(awk "BEGIN{print $(date +%s.%N) - $start}")
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1)); printf 'PASS %-22s %6.2f s\n' "$t" "$secs"
    else
        fail=$((fail + 1)); failed="$failed $t"; printf 'FAIL %-22s %6.2f s (exit %d)\n' "$t" "$secs" "$rc"
        sed 's/^/    /' "$BUILD/tests/$t.log" | tail -n 30
    fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
