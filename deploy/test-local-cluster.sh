#!/usr/bin/env bash
# Tests deploy/local-cluster.sh with built binaries (.ci/run runs it with
# the ones its tests ran):
#
#  1. started in the background by a shell that then exits, it stops every
#     process it started (the ones on its "pids" line, and itself) within
#     a bounded time;
#  2. end to end: the address it prints solves the sample through the
#     cluster, and on SIGTERM every process it started is gone.
#
# Only the processes the script reports are checked and cleaned up, never
# other colball processes of the machine (a PID is only taken for ours
# while its process has the start time it had when the script reported it).
#
#   cargo build --release --bin colball --bin colball-server
#   deploy/test-local-cluster.sh [SCRIPT]   # default: deploy/local-cluster.sh
#
# Environment: COLBALL_BIN (default target/release), GONE_SECS (how long
# the processes may take to stop, default 30).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
script=${1:-$root/deploy/local-cluster.sh}
export COLBALL_BIN=${COLBALL_BIN:-$root/target/release}
gone_secs=${GONE_SECS:-30}
sample=$root/docs/examples/sample.in
expected=$'-1\n6'

tmp=$(mktemp -d)
declare -A started=() # pid -> its start time when the script reported it

# The start time of process $1, in clock ticks since boot ("" when unknown
# or without /proc). With the PID it names one process: a PID used again
# later has another start time, and exec keeps it.
start_of() {
    local stat
    [ -r "/proc/$1/stat" ] || return 0
    { stat=$(<"/proc/$1/stat"); } 2>/dev/null || return 0
    stat=${stat##*) }
    read -r -a stat <<<"$stat"
    echo "${stat[19]}"
}

# Whether $1, a process the script reported, still runs: it answers, is
# not a zombie, and (with /proc) is still the same process.
ours_running() {
    local stat
    kill -0 "$1" 2>/dev/null || return 1
    if [ -r "/proc/$1/stat" ]; then
        { stat=$(<"/proc/$1/stat"); } 2>/dev/null || return 1
        stat=${stat##*) }
        [ "${stat%% *}" != Z ] || return 1
        [ "$(start_of "$1")" = "${started[$1]:-}" ] || return 1
    fi
    return 0
}

# Takes the processes $@ as ours, remembering their start times.
adopt() {
    local pid
    for pid in "$@"; do started[$pid]=$(start_of "$pid"); done
}

# Waits up to $gone_secs for the processes $@ to be gone; fails naming the
# ones left.
all_gone() {
    local pid left tenths=0
    while :; do
        left=()
        for pid in "$@"; do
            if ours_running "$pid"; then left+=("$pid"); fi
        done
        [ ${#left[@]} -eq 0 ] && return 0
        if [ "$tenths" -ge $((gone_secs * 10)) ]; then
            echo "still running ${gone_secs}s later:" >&2
            for pid in "${left[@]}"; do
                echo "  $pid $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" >&2
            done
            return 1
        fi
        sleep 0.1
        tenths=$((tenths + 1))
    done
}

# On the way out, stop whatever of ours is left (a failed case), then
# remove the scratch directory.
finish() {
    set +e
    local pid left=()
    for pid in "${!started[@]}"; do
        if ours_running "$pid"; then left+=("$pid"); fi
    done
    if [ ${#left[@]} -gt 0 ]; then
        kill -TERM "${left[@]}" 2>/dev/null
        sleep 2
        for pid in "${left[@]}"; do
            if ours_running "$pid"; then kill -KILL "$pid" 2>/dev/null; fi
        done
    fi
    rm -rf "$tmp"
}
trap finish EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in "$tmp"/*.err; do
        [ -s "$f" ] && { echo "--- $(basename "$f"):" >&2; tail -n 20 "$f" >&2; }
    done
    exit 1
}

# The PIDs on the "pids" line of the script's output file $1.
reported_pids() {
    sed -n 's/^pids //p' "$1" | head -n 1
}

# 1. The parent shell exits: everything goes with it.
echo "local-cluster: a parent shell that exits takes the cluster with it"
bash -c '"$1" 1 1 >"$2/parent.out" 2>"$2/parent.err" </dev/null &
    echo $! >"$2/parent.pid"
    for _ in $(seq 600); do
        grep -q "^connect " "$2/parent.out" && exit 0
        sleep 0.1
    done
    exit 1' _ "$script" "$tmp" || fail "the cluster did not start within 60 s"
script_pid=$(<"$tmp/parent.pid")
read -r -a pids <<<"$(reported_pids "$tmp/parent.out")"
[ ${#pids[@]} -ge 2 ] || fail "no 'pids' line with the coordinator and a worker"
adopt "$script_pid" "${pids[@]}"
echo "  parent gone; waiting for the script ($script_pid) and pids ${pids[*]}"
all_gone "$script_pid" "${pids[@]}" || fail "processes outlived the shell that started them"
echo "  ok: all gone"

# 2. End to end: solve through it, SIGTERM, nothing left.
echo "local-cluster: end to end"
exec 4< <(exec "$script" 2 1 2>"$tmp/e2e.err" </dev/null)
cluster=$!
adopt "$cluster"
url="" pids=()
while read -r -t 60 line <&4; do
    case $line in
        "pids "*) read -r -a pids <<<"${line#pids }" ;;
        "connect "*) url=${line#connect }; break ;;
    esac
done
[ -n "$url" ] || fail "the script printed no 'connect' line"
[ ${#pids[@]} -ge 3 ] || fail "no 'pids' line with the coordinator and two workers"
adopt "${pids[@]}"
got=$(timeout 120 "$COLBALL_BIN/colball" solve --connect "$url" "$sample") ||
    fail "colball solve --connect $url failed"
[ "$got" = "$expected" ] || fail "through the local cluster: $got"
kill -TERM "$cluster"
wait "$cluster" || true
exec 4<&-
all_gone "$cluster" "${pids[@]}" || fail "processes left behind after SIGTERM"
echo "  ok: solved through $url; after SIGTERM, pids ${pids[*]} are gone"
