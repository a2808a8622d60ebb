#!/usr/bin/env bash
# One-way latency publisher -> router -> subscriber at a paced rate, next to the raw TCP
# ping-pong floor measured in the same run, RUNS times per idle strategy.
#
#   scripts/bench-latency.sh [RATE] [SECS] [RUNS] [IDLE...]
#
# LATENCY_ARGS adds options to every run of the example, e.g.
#   LATENCY_ARGS=--raw-delayed-acks scripts/bench-latency.sh 10000 10 3 spin
# puts the raw baselines' readers in the delayed-ACK mode tickwire's sockets are in.
#
# Prints each run's table (see crates/bench/examples/latency.rs) and, per idle
# strategy, the median p50 ratios of tickwire to the raw TCP ping-pong half round trip
# and to the raw two-hop TCP relay.
set -euo pipefail
RATE=${1:-10000}; SECS=${2:-10}; RUNS=${3:-3}; shift 3 || true
IDLES=("${@:-spin}")
cd "$(dirname "$0")/.."
cargo build --release -q -p tickwire -p tickwire-bench --bins --examples
echo "commit $(git rev-parse --short HEAD); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); kernel $(uname -r)"
for idle in "${IDLES[@]}"; do
  ratios=(); relays=()
  for i in $(seq 1 "$RUNS"); do
    # shellcheck disable=SC2086 # LATENCY_ARGS is a list of options
    out=$(target/release/examples/latency --rate "$RATE" --secs "$SECS" --idle "$idle" ${LATENCY_ARGS:-})
    echo "--- idle=$idle run $i"; echo "$out" | tail -n +3
    ratios+=("$(sed -nE 's/.*p50 ratio tickwire\/raw = ([0-9.]+);.*/\1/p' <<<"$out")")
    relays+=("$(sed -nE 's/.*tickwire\/relay = ([0-9.]+).*/\1/p' <<<"$out")")
  done
  median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  echo "=== idle=$idle: p50 tickwire/raw ping-pong ${ratios[*]} -> median $(median "${ratios[@]}");" \
       "tickwire/raw relay ${relays[*]} -> median $(median "${relays[@]}")"
done
