#!/usr/bin/env bash
# Direct-message latency through a router that holds N idle durable queues (nothing
# published to them): the queues must cost a direct message nothing.
#
#     scripts/bench-idle-queues.sh target/release/tickwire 10000 [RUNS]
#
# Starts a spinning router (pinned to CPU 1) on a free port and shm name, creates queues
# q1..qN (one pattern each, matching nothing the bench publishes) with `tickwire queue
# create`, then runs `bench pingpong --transports tickwire-shm` against it RUNS times
# (default 3) and prints each run's row (size, mean, min, median, max, p99, p99.9 in µs).
# Run it with N=0 for the same router without queues. BENCHMARKS.md, 2026-12-02 16:54.
set -eu
bin=$1; n=$2; runs=${3:-3}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
name="idleq-$$"
data=$(mktemp -d /tmp/tickwire-idleq-XXXXXX)   # its spool, removed at exit
taskset -c 1 "$bin" router --listen "127.0.0.1:$port" --idle spin --shm "$name" --data-dir "$data" \
    > /dev/null 2>&1 &
router=$!
trap 'kill "$router" 2>/dev/null; wait "$router" 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 1 50); do
    "$bin" stats --router "127.0.0.1:$port" > /dev/null 2>&1 && break
    sleep 0.1
done
for i in $(seq 1 "$n"); do
    "$bin" queue create "q$i" --sub "idle/$i" --router "127.0.0.1:$port" > /dev/null
done
echo "router with $n idle queues: tickwire-shm ping-pong, 100 B, half round trip in µs"
echo "  size      mean       min    median       max       p99     p99.9    stddev iterations"
for _ in $(seq 1 "$runs"); do
    nice -n -20 "$bin" bench pingpong --transports tickwire-shm --router "shm:$name" --sizes 100 \
        --iterations 20000 --warmup 2000 --idle spin --pin 0,1 2>&1 | grep -A1 "size  *mean" | tail -1
done
