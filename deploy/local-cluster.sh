#!/usr/bin/env bash
# Starts a coordinator and N workers as local processes from the release
# binaries, prints the address to use with --connect, and stops them all on
# Ctrl-C, on SIGTERM, or when the process that started this script ends.
#
#   cargo build --release
#   deploy/local-cluster.sh [WORKERS] [THREADS_PER_WORKER]
#
# Environment: COLBALL_BIN (directory of the binaries, default
# target/release), COLBALL_PORT and COLBALL_HTTP_PORT (default 0: any free
# port; the chosen ones are printed), RUST_LOG.
set -euo pipefail

workers=${1:-2}
threads=${2:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${COLBALL_BIN:-$root/target/release}
server="$bin/colball-server"
if [ ! -x "$server" ]; then
    echo "local-cluster: $server not found; run 'cargo build --release' first" >&2
    exit 1
fi

pids=()
watchdog=""
cleanup() {
    trap - EXIT INT TERM
    [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
    if [ ${#pids[@]} -gt 0 ]; then
        # Workers first (they drain), then the coordinator.
        kill -TERM "${pids[@]:1}" 2>/dev/null || true
        kill -TERM "${pids[0]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
    fi
    echo "local-cluster: stopped" >&2
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The coordinator prints "http ADDR" and "listening ADDR" once bound; read
# them from its standard output instead of guessing ports.
exec 3< <(exec "$server" coordinator \
    --listen "127.0.0.1:${COLBALL_PORT:-0}" \
    --http "127.0.0.1:${COLBALL_HTTP_PORT:-0}")
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

# Stop with the parent: if whoever started us goes away, so do we.
parent=$PPID
self=$$
( while kill -0 "$parent" 2>/dev/null && kill -0 "$self" 2>/dev/null; do sleep 1; done
  kill -TERM "$self" 2>/dev/null || true ) &
watchdog=$!

echo "colball cluster: coordinator and $workers worker(s) running"
echo "  colball solve --connect http://$grpc FILE"
echo "  metrics: http://$http/metrics   (Ctrl-C stops everything)"
echo "connect http://$grpc"

# Keep running until a signal (or the coordinator exits).
wait "${pids[0]}"
