#!/usr/bin/env bash
# Issue 15's bars: the shared-memory transport next to TCP, same session, RUNS times.
#
#   scripts/bench-shm.sh [RUNS] [MSGS]
#
# 1. Ping-pong, spin, pinned (measuring thread CPU 0, echo / router CPU 1), 100 B:
#    raw shm ring pair, through the router over shm, raw TCP, through the router over TCP.
# 2. One-way publisher -> router -> subscriber at 10,000 msg/s, router spinning on CPU 1,
#    both clients over shm in one thread on CPU 0, with the raw TCP and raw shm
#    ping-pong floors measured in the same run (crates/bench/examples/latency.rs --shm).
# 3. 1 -> 1 throughput, 100 B, lossless: `tickwire sub --quiet` + `tickwire pub --rate 0`
#    through one router (default idle, hybrid) over TCP, then over shm, alternating.
# 4. The paced sweep (`bench stream`, the bar's measure) over TCP and shm through the
#    router, beside the floors of the same topology (tcp-relay, shm-relay), blocking
#    and spinning.
set -euo pipefail
RUNS=${1:-3}; MSGS=${2:-5000000}
cd "$(dirname "$0")/.."
cargo build --release -q --locked -p tickwire -p tickwire-bench --bins --examples
TW=target/release/tickwire
echo "commit $(git rev-parse --short HEAD); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "=== 1. ping-pong"
for i in $(seq 1 "$RUNS"); do
  $TW bench pingpong --transports shm,shm-relay,tickwire-shm,tcp,tickwire --sizes 100 \
    --iterations 20000 --warmup 2000 --idle spin --pin 0,1 --json "/tmp/bench-shm-pp-$i.json" \
    | grep -E '^ +100 |^(shm|tickwire|tcp)|p50 /' || true
done

echo "=== 2. one-way at 10k msg/s"
for i in $(seq 1 "$RUNS"); do
  target/release/examples/latency --rate 10000 --secs 5 --idle spin --shm \
    | grep -E 'ping-pong|one-way @|ratio'
done

echo "=== 3. throughput 1 -> 1, 100 B"
$TW router --listen 127.0.0.1:0 --no-guaranteed --shm "bench-tp-$$" >/tmp/bench-shm-router.out 2>/dev/null & RPID=$!
trap 'kill $RPID 2>/dev/null || true' EXIT
sleep 1
ADDR=$(head -1 /tmp/bench-shm-router.out | awk '{print $NF}')
tcp=(); shm=()
for i in $(seq 1 "$RUNS"); do
  for via in "$ADDR" "shm:bench-tp-$$"; do
    $TW sub --router "$via" --quiet --count "$MSGS" 'tp/>' 2>/tmp/bench-shm-sub.txt & SUBPID=$!
    sleep 0.5
    $TW pub --router "$via" tp/x --count "$MSGS" --size 100 --rate 0 2>/dev/null >/dev/null
    wait $SUBPID
    line=$(cat /tmp/bench-shm-sub.txt)
    rate=$(sed -E 's/.*: ([0-9]+) msg\/s.*/\1/' <<<"$line" | head -1)
    echo "run $i via $via: $line"
    case "$line" in *"(0 discarded"*) ;; *) echo "  ^ check for loss";; esac
    if [ "$via" = "$ADDR" ]; then tcp+=("$rate"); else shm+=("$rate"); fi
  done
done
t=$(median "${tcp[@]}"); s=$(median "${shm[@]}")
echo "median subscriber rate: tcp $t msg/s, shm $s msg/s, shm/tcp $(awk -v a="$s" -v b="$t" 'BEGIN{printf "%.2f", a/b}')"

echo "=== 4. paced 1 -> 1 sweep, 100 B, lossless, against both floors of the topology"
# tcp-relay / shm-relay: a bare relay thread in the router's place (no router), so
# shm-relay / tcp-relay is what shared memory itself buys over TCP here.
# Both idle strategies: the ratio depends on it here (BENCHMARKS.md, 2026-12-05 21:09-:
# spinning costs the TCP path more than the shm one on 2 cores).
for idle in block spin; do
  for i in $(seq 1 "$RUNS"); do
    echo "--- idle $idle, run $i"
    $TW bench stream --transport tcp-relay,shm-relay,tickwire,tickwire-shm --size 100 \
      --rates 6M,8M,10M,12M,14M,16M,18M,20M,24M --keep-going --step-duration 2s --idle "$idle" \
      --pin 0,1 --json "/tmp/bench-shm-stream-$idle-$i.json" | sed -n '/^highest lossless rate/,$p'
  done
done
