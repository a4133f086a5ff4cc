#!/usr/bin/env bash
# `make test`'s two lanes, run at the same time:
#
#     tools/test_lanes.sh LOG_DIR "BACKGROUND_STEPS" "FOREGROUND_STEPS"
#
# Each step is a make target.  The background steps start first, each in a
# process group of its own, under nice (TEST_BG_NICE, default 10), with its
# output in LOG_DIR/STEP.log.  A background step may be a chain, "a+b+c":
# the targets one after another in that one background job, each timed in
# its log (.ci/run puts the release checks after the servers' half this
# way), every one run, the chain failing if any does.  The foreground steps then run one after
# another, their output straight through, up to the first that fails.  Then
# the background steps are waited for (also after a failure, so that their
# result is reported and their servers are stopped by their own teardown)
# and their output is printed.  Every step ends with a line
# `== make test: STEP N s` or `== make test: STEP FAILED after N s`.
# Exit status 0 when every step passed.
#
# Why: the steps need nothing from each other, and on the CI machine's two
# cores one lane alone leaves a core idle for much of the run (one pytest
# process at a time; the sanitizer passes and the fuzzers are mostly
# single-threaded).
# The background lane is the half of the plain pass that starts servers --
# Spark's JVMs, Connect server and standalone cluster, the brokers, amqtt --
# whose timeouts are generous; the foreground lane is the rest of the plain
# pass, the sanitizer passes and the fuzzers.  nice keeps a core for the
# foreground's timing-sensitive tests (a thread that must get the CPU while
# match_many runs, Ctrl-C's latency).
#
# SIGINT or SIGTERM (Ctrl-C) is passed on to the background steps as
# SIGINT, so that pytest runs its teardown before this script exits: the
# servers are stopped by the fixtures that started them.
set -u
logs=$1
read -r -a bg <<<"$2"
read -r -a fg <<<"$3"
make=${MAKE:-make}
mkdir -p "$logs"

declare -A pid
for t in "${bg[@]}"; do
    rm -f "$logs/$t.log" "$logs/$t.status"
    echo "== make test: $t, in the background ($(date -u +%H:%M:%S) UTC; output in $logs/$t.log)"
    # job control for this one command: a process group of its own (a
    # terminal's Ctrl-C does not reach it directly), where SIGINT is not
    # ignored as it is for a plain `&` in a script -- it can be interrupted;
    # stdin from /dev/null (a background group reading a terminal stops)
    set -m
    (
        s=$(date +%s) rc=0
        for target in ${t//+/ }; do
            ts=$(date +%s) trc=0
            echo "== make test: $target ($(date -u +%H:%M:%S) UTC)" >>"$logs/$t.log"
            nice -n "${TEST_BG_NICE:-10}" "$make" --no-print-directory "$target" </dev/null >>"$logs/$t.log" 2>&1 || trc=$?
            echo "== make test: $target $([ "$trc" = 0 ] || echo "FAILED after ")$(( $(date +%s) - ts )) s" >>"$logs/$t.log"
            [ "$rc" != 0 ] || rc=$trc
            [ "$trc" -lt 128 ] || break        # interrupted: the chain stops
        done
        echo "$rc $(( $(date +%s) - s ))" >"$logs/$t.status"
    ) &
    pid[$t]=$!
    set +m
done

interrupted=
stop_background() {
    local b
    interrupted=1
    for b in "${bg[@]}"; do
        kill -INT -- "-${pid[$b]}" 2>/dev/null
    done
}
trap stop_background INT TERM

failed=()
for t in "${fg[@]}"; do
    [ -z "$interrupted" ] || break
    s=$(date +%s)
    echo "== make test: $t ($(date -u +%H:%M:%S) UTC)"
    if "$make" --no-print-directory "$t"; then
        echo "== make test: $t $(( $(date +%s) - s )) s"
    else
        echo "== make test: $t FAILED after $(( $(date +%s) - s )) s"
        failed+=("$t")
        break
    fi
done

for t in "${bg[@]}"; do
    # `wait` returns early when a trapped signal arrives: wait again
    while kill -0 "${pid[$t]}" 2>/dev/null; do wait "${pid[$t]}"; done
    echo "== make test: $t (background) output:"
    cat "$logs/$t.log"
    if [ -f "$logs/$t.status" ] && read -r rc secs <"$logs/$t.status" && [ "$rc" = 0 ]; then
        echo "== make test: $t $secs s (background)"
    elif [ -f "$logs/$t.status" ]; then
        echo "== make test: $t FAILED after $secs s (background)"
        failed+=("$t")
    else
        echo "== make test: $t interrupted (background)"
        failed+=("$t")
    fi
done
if [ -n "$interrupted" ]; then
    echo "== make test: interrupted"
    exit 130
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "== make test: FAILED: ${failed[*]}"
    exit 1
fi
