#!/usr/bin/env bash
# Throughput, 1 publisher -> router -> 1 subscriber, 100-byte messages, no loss:
# tickwire next to NATS on the same machine, alternating, RUNS times each.
#
#   scripts/install-nats.sh            # once: nats-server + nats-bench from the Go proxy
#   scripts/bench-throughput.sh [MSGS] [RUNS]
#
# tickwire: `tickwire sub --quiet --count MSGS` measures from its first to its last
# message and reports messages the router discarded (must be 0); `tickwire pub
# --count MSGS --size 100 --rate 0` publishes as fast as it can.
# NATS: nats-bench (the nats.go benchmark tool) with -np 1 -ns 1 against nats-server.
set -euo pipefail
MSGS=${1:-5000000}
RUNS=${2:-3}
cd "$(dirname "$0")/.."
cargo build --release -q -p tickwire
TW=target/release/tickwire
GOBIN="${GOBIN:-$HOME/go/bin}"
NATS_SERVER="$GOBIN/nats-server"; NATS_BENCH="$GOBIN/nats-bench"
[ -x "$NATS_SERVER" ] && [ -x "$NATS_BENCH" ] || { echo "run scripts/install-nats.sh first"; exit 1; }
TWPORT=17420; NPORT=14222
echo "commit $(git rev-parse --short HEAD); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "messages per run: $MSGS x 100 bytes; runs: $RUNS"

$TW router --listen 127.0.0.1:$TWPORT --no-guaranteed >/dev/null 2>/tmp/tw-router.log & TWPID=$!
"$NATS_SERVER" -a 127.0.0.1 -p $NPORT >/dev/null 2>&1 & NPID=$!
trap 'kill $TWPID $NPID 2>/dev/null || true' EXIT
sleep 1

tw_rates=(); nats_rates=()
for i in $(seq 1 "$RUNS"); do
  $TW sub --router 127.0.0.1:$TWPORT --quiet --count "$MSGS" 'tp/>' 2>/tmp/tw-sub.txt & SUBPID=$!
  sleep 0.5
  $TW pub --router 127.0.0.1:$TWPORT tp/x --count "$MSGS" --size 100 --rate 0 2>/tmp/tw-pub.txt
  wait $SUBPID
  line=$(cat /tmp/tw-sub.txt)
  rate=$(sed -E 's/.*: ([0-9]+) msg\/s/\1/' <<<"$line")
  echo "tickwire run $i: $line | $(cat /tmp/tw-pub.txt)"
  case "$line" in *"(0 discarded"*) ;; *) echo "  ^ LOSS: run invalid";; esac
  tw_rates+=("$rate")

  out=$("$NATS_BENCH" -s nats://127.0.0.1:$NPORT -np 1 -ns 1 -n "$MSGS" -ms 100 tp.x 2>&1)
  rate=$(grep -E '^ *Sub stats' <<<"$out" | head -1 | sed -E 's/.*Sub stats: ([0-9,]+) msgs.*/\1/' | tr -d ,)
  echo "nats     run $i: subscriber $rate msg/s | $(grep -E '^ *Pub stats' <<<"$out" | head -1 | xargs)"
  nats_rates+=("$rate")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tw=$(median "${tw_rates[@]}"); nt=$(median "${nats_rates[@]}")
echo
echo "median subscriber rate: tickwire $tw msg/s, NATS $nt msg/s, ratio $(awk -v a="$tw" -v b="$nt" 'BEGIN{printf "%.2f", a/b}')"
