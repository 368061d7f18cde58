#!/bin/sh
# Runs the libFuzzer targets of Tests/Fuzz one after the other and prints, per target, the executions, seconds,
# coverage (cov: edges, ft: features), corpus size and whether it crashed. Exits 1 if any target crashed or
# failed a property. Used by `make fuzz-smoke` and `make fuzz` (see the Makefile).
#
#   run-fuzzers.sh BIN_DIR SEEDS_DIR CORPUS_DIR ARTIFACTS_DIR LIBFUZZER_OPTION... -- TARGET...
#
# Each target reads SEEDS_DIR/TARGET and CORPUS_DIR/TARGET and adds what it finds to CORPUS_DIR/TARGET; a
# crashing input is written to ARTIFACTS_DIR/TARGET-crash-<sha1> (libFuzzer's -artifact_prefix), its log to
# ARTIFACTS_DIR/TARGET.log.
set -u
# libFuzzer reports crashes itself; the Swift runtime's backtracer would only slow that down.
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"
bin=$1 seeds=$2 corpus=$3 artifacts=$4
shift 4
options=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do options="$options $1"; shift; done
[ $# -gt 0 ] && shift
mkdir -p "$artifacts"
summary=""
failed=0
total_runs=0
total_crashes=0
for target in "$@"; do
  mkdir -p "$corpus/$target" "$seeds/$target"
  log="$artifacts/$target.log"
  start=$(date +%s)
  # shellcheck disable=SC2086 # $options holds several libFuzzer options
  nice -n 10 "$bin/$target" $options -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/$target-" \
    "$corpus/$target" "$seeds/$target" >"$log" 2>&1
  status=$?
  seconds=$(( $(date +%s) - start ))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  line=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: ' | tail -n 1)
  cov=$(printf '%s\n' "$line" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
  ft=$(printf '%s\n' "$line" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  units=$(find "$corpus/$target" -type f | wc -l)
  if [ "$status" -eq 0 ]; then crashes=0; else crashes=1; failed=1; fi
  total_runs=$((total_runs + ${runs:-0}))
  total_crashes=$((total_crashes + crashes))
  if [ "$crashes" -ne 0 ]; then
    echo "$target: FAILED (exit $status); see $log" >&2
    grep -E 'property violated|ERROR: |Fatal error|Test unit written' "$log" | head -n 5 >&2
  fi
  summary="$summary$(printf '%-24s %12s %8s %7s %7s %7s %8s' "$target" "${runs:-?}" "$seconds" "${cov:-?}" "${ft:-?}" "$units" "$crashes")
"
done
printf '%-24s %12s %8s %7s %7s %7s %8s\n' target executions seconds cov ft corpus crashes
printf '%s' "$summary"
printf '%-24s %12s %8s %7s %7s %7s %8s\n' total "$total_runs" "" "" "" "" "$total_crashes"
exit "$failed"
