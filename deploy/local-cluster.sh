#!/usr/bin/env bash
# Starts a coordinator and N workers as local processes from the release
# binaries, prints the addresses to use, and stops them all on Ctrl-C, on
# SIGTERM or SIGHUP, or when the process that started this script ends.
#
#   cargo build --release
#   deploy/local-cluster.sh [WORKERS] [THREADS_PER_WORKER] [DATA_DIR]
#
# With DATA_DIR the coordinator keeps durable jobs there (SQLite), so they
# survive a restart of the cluster on the same directory; without it jobs
# live in memory.
#
# Environment: COLBALL_BIN (directory of the binaries, default
# target/release), COLBALL_PORT and COLBALL_HTTP_PORT (default 0: any free
# port; the chosen ones are printed), COLBALL_STOP_SECS (how long to wait
# for the processes to stop before killing them, default 75: a busy worker
# drains for up to 60 s), RUST_LOG.
#
# Standard output, for people and for scripts (deploy/test-local-cluster.sh
# reads it); the last two lines, in this order, once everything is started:
#
#   pids COORDINATOR WORKER... WATCHDOG   the processes this script started
#   connect http://ADDR                   the gRPC address for --connect
#
# The lines before them (addresses, dashboard and metrics URLs) are for
# people and may change.
set -euo pipefail

workers=${1:-2}
threads=${2:-1}
data_dir=${3:-}
data_args=()
if [ -n "$data_dir" ]; then data_args=(--data-dir "$data_dir"); fi
stop_secs=${COLBALL_STOP_SECS:-75}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${COLBALL_BIN:-$root/target/release}
server="$bin/colball-server"
if [ ! -x "$server" ]; then
    echo "local-cluster: $server not found; run 'cargo build --release' first" >&2
    exit 1
fi

# Whether process $1 still runs (a zombie does not count). Works without
# /proc too, with kill -0 alone.
running() {
    local stat
    kill -0 "$1" 2>/dev/null || return 1
    if [ -r "/proc/$1/stat" ]; then
        { stat=$(<"/proc/$1/stat"); } 2>/dev/null || return 1
        stat=${stat##*) }
        [ "${stat%% *}" != Z ] || return 1
    fi
    return 0
}

# The parent process of $1, or nothing when /proc cannot tell.
parent_of() {
    local stat
    [ -r "/proc/$1/stat" ] || return 0
    { stat=$(<"/proc/$1/stat"); } 2>/dev/null || return 0
    stat=${stat##*) }
    stat=${stat#* }
    echo "${stat%% *}"
}

pids=()
watchdog=""
cleanup() {
    # Nothing in here may stop the cleanup half-way: no set -e, no second
    # signal (a second Ctrl-C or SIGTERM only makes it kill at once), and
    # no SIGPIPE from a closed standard error.
    set +e
    trap - EXIT
    trap 'hurry=1' INT TERM HUP
    trap '' PIPE
    local hurry=0 pid left waited=0
    if [ -n "$watchdog" ]; then
        kill -TERM "$watchdog" 2>/dev/null
    fi
    if [ ${#pids[@]} -gt 0 ]; then
        # Workers first (they drain), then the coordinator.
        for pid in "${pids[@]:1}"; do kill -TERM "$pid" 2>/dev/null; done
        kill -TERM "${pids[0]}" 2>/dev/null
        # Wait, bounded, then kill whatever is left.
        while :; do
            left=()
            for pid in "${pids[@]}"; do
                if running "$pid"; then left+=("$pid"); fi
            done
            [ ${#left[@]} -eq 0 ] && break
            if [ "$hurry" = 1 ] || [ "$waited" -ge $((stop_secs * 10)) ]; then
                echo "local-cluster: killing ${left[*]}" >&2
                kill -KILL "${left[@]}" 2>/dev/null
                break
            fi
            sleep 0.1
            waited=$((waited + 1))
        done
        wait "${pids[@]}" 2>/dev/null
    fi
    if [ -n "$watchdog" ]; then wait "$watchdog" 2>/dev/null; fi
    echo "local-cluster: stopped" >&2
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# The coordinator prints "http ADDR" and "listening ADDR" once bound; read
# them from its standard output instead of guessing ports.
exec 3< <(exec "$server" coordinator \
    --listen "127.0.0.1:${COLBALL_PORT:-0}" \
    --http "127.0.0.1:${COLBALL_HTTP_PORT:-0}" "${data_args[@]}")
pids+=($!)
grpc="" http=""
while [ -z "$grpc" ] && read -r -t 30 line <&3; do
    case $line in
        "listening "*) grpc=${line#listening } ;;
        "http "*) http=${line#http } ;;
    esac
done
if [ -z "$grpc" ]; then
    echo "local-cluster: the coordinator did not start" >&2
    exit 1
fi

for i in $(seq 1 "$workers"); do
    "$server" worker --coordinator "http://$grpc" --threads "$threads" --name "local-$i" &
    pids+=($!)
done

# Stop with the parent: when whoever started us goes away (we are handed
# to another parent; without /proc, when its PID no longer answers), stop
# everything through the cleanup above. If this script itself is killed
# (SIGKILL leaves no cleanup), the watchdog stops the processes itself.
parent=$PPID
self=$$
children=("${pids[@]}")
(
    trap - EXIT INT HUP
    nap=""
    trap '[ -n "$nap" ] && kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
        if ! running "$self"; then
            for pid in "${children[@]}"; do
                if running "$pid"; then kill -TERM "$pid" 2>/dev/null || true; fi
            done
            exit 0
        fi
        now=$(parent_of "$self")
        if [ -n "$now" ] && [ "$now" != "$parent" ]; then break; fi
        if [ -z "$now" ] && ! kill -0 "$parent" 2>/dev/null; then break; fi
        sleep 1 &
        nap=$!
        wait "$nap" || true
        nap=""
    done
    kill -TERM "$self" 2>/dev/null || true
) &
watchdog=$!

echo "colball cluster: coordinator and $workers worker(s) running"
echo "  colball solve --connect http://$grpc FILE"
echo "  dashboard: http://$http/"
echo "  metrics:   http://$http/metrics"
echo "  (Ctrl-C stops everything)"
echo "pids ${pids[*]} $watchdog"
echo "connect http://$grpc"

# Keep running until a signal (or the coordinator exits).
wait "${pids[0]}"
