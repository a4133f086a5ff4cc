#!/bin/sh
# Run one libFuzzer harness for a number of seconds:
#     fuzz/run.sh TARGET SECONDS [more libFuzzer flags]
# TARGET is load, ops, validate, image, arrow or build (build/fuzz/fuzz_TARGET, from `make
# fuzz-build`).  The working corpus grows in build/fuzz/corpus/TARGET,
# seeded from fuzz/seeds/TARGET; a finding is written to
# build/fuzz/artifacts/ and makes this script fail.  Prints the number of
# runs.  Known, reported undefined behaviour is listed (narrowly) in
# tests/ubsan.supp; everything else halts.
set -eu
cd "$(dirname "$0")/.."
t=$1
secs=$2
shift 2
dir=build/fuzz
mkdir -p "$dir/corpus/$t" "$dir/artifacts"
log="$dir/$t.log"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/tests/ubsan.supp"
if "$dir/fuzz_$t" -max_total_time="$secs" -timeout=60 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$dir/artifacts/$t-" "$@" "$dir/corpus/$t" "fuzz/seeds/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz_$t: $runs runs in ${secs}s, nothing found ($(ls "$dir/corpus/$t" | wc -l) inputs in the corpus)"
else
    tail -n 80 "$log"
    echo "fuzz_$t: FOUND A PROBLEM (log: $log; input: $dir/artifacts/$t-*)" >&2
    exit 1
fi
