#!/usr/bin/env bash
# Shared-memory ping-pong latency through a router that also serves N idle clients
# (connected, subscribed to topics nothing publishes): idle clients must cost the
# others next to nothing.
#
#     scripts/bench-idle-clients.sh target/release/tickwire 1000 [RUNS] [shm|tcp]
#
# Starts a spinning router (pinned to CPU 1) on a free port and shm name, connects N
# idle clients over shared memory (or TCP) from one process (the `hold_clients`
# example, built here), then runs `bench pingpong --transports tickwire-shm` against
# the router RUNS times (default 3) and prints each run's row (size, mean, min,
# median, max, p99, p99.9, stddev in µs). Run it with N=0 for the same router alone.
# BENCHMARKS.md, 2026-12-03.
set -eu
bin=$1; n=$2; runs=${3:-3}; kind=${4:-shm}
cargo build --release --locked -q -p tickwire-client --example hold_clients
holder=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/examples/hold_clients
ulimit -n "$(ulimit -Hn)"  # each client holds a few descriptors on both sides
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
name="idlec-$$"
taskset -c 1 "$bin" router --listen "127.0.0.1:$port" --idle spin --shm "$name" --no-guaranteed \
    --max-clients $((n + 64)) > /dev/null 2>&1 &
router=$!
hold=""
cleanup() {
    [ -n "$hold" ] && kill "$hold" 2>/dev/null && wait "$hold" 2>/dev/null
    kill "$router" 2>/dev/null; wait "$router" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 50); do
    "$bin" stats --router "127.0.0.1:$port" > /dev/null 2>&1 && break
    sleep 0.1
done
if [ "$n" -gt 0 ]; then
    if [ "$kind" = shm ]; then addr="shm:$name"; else addr="127.0.0.1:$port"; fi
    fifo=$(mktemp -u); mkfifo "$fifo"
    taskset -c 0 "$holder" "$addr" "$n" 600 > "$fifo" &
    hold=$!
    read -r line < "$fifo"; rm -f "$fifo"
    [ "$line" = ready ] || { echo "the idle clients did not connect" >&2; exit 1; }
fi
echo "router with $n idle $kind clients: tickwire-shm ping-pong, 100 B, half round trip in µs"
echo "  size      mean       min    median       max       p99     p99.9    stddev iterations"
for _ in $(seq 1 "$runs"); do
    nice -n -20 "$bin" bench pingpong --transports tickwire-shm --router "shm:$name" --sizes 100 \
        --iterations 20000 --warmup 2000 --idle spin --pin 0,1 2>&1 | grep -A1 "size  *mean" | tail -1
done
