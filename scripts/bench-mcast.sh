#!/usr/bin/env bash
# Issue 21's bars: reliable multicast fan-out to 1, 4 and 8 receiver processes, with
# plain UDP multicast (`--raw`: one frame per datagram, no sequencing, no recovery) as
# the floor in the same run, then 1% and 5% seeded loss.
#
#   scripts/bench-mcast.sh [MSGS] [RATE]        # defaults: 20000 messages at 10k msg/s
#
# Per configuration it prints the sender's CPU per message (process CPU time, sending
# plus answering NAKs, divided by messages) and, over the receivers, the median of their
# one-way p50 (publisher stamp to delivery, CLOCK_MONOTONIC of this host) and the worst
# p99; under loss, the recovery latency (first seen missing -> filled) p50/p99 and
# whether every receiver got every message in order. With `perf` installed the sender's
# CPU is also split into user and system time (perf stat's rusage figures): the
# protocol's own work is the user part; on loopback the kernel delivers a copy to every
# member socket inside the sender's `sendto`, which is system time.
set -euo pipefail
MSGS=${1:-20000}; RATE=${2:-10k}
cd "$(dirname "$0")/.."
cargo build --release -q --locked -p tickwire
TW=target/release/tickwire
echo "commit $(git rev-parse --short HEAD); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
PORT=$((20000 + RANDOM % 20000))
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run NAME RECEIVERS SEND_ARGS... : starts the receivers, waits for them to join, sends.
run() {
  local name=$1 n=$2; shift 2
  local raw="" loss=()
  [ "$name" = raw ] && raw=--raw
  [ "${LOSS:-0}" != 0 ] && loss=(--loss "$LOSS")
  PORT=$((PORT + 1))
  local group="239.255.74.50:$PORT" pids=()
  for i in $(seq 1 "$n"); do
    $TW mcast recv --group "$group" --count "$MSGS" --timeout 60s --quiet --print-json $raw \
      ${loss[@]+"${loss[@]}"} ${loss[@]+--seed $((100 + i))} \
      >"$TMP/r$i.json" 2>"$TMP/r$i.err" &
    pids+=($!)
  done
  for i in $(seq 1 "$n"); do
    until grep -q ready "$TMP/r$i.err" 2>/dev/null; do sleep 0.05; done
  done
  local perf=()
  command -v perf >/dev/null && perf=(perf stat -x, -e user_time,system_time -o "$TMP/perf.txt" --)
  rm -f "$TMP/perf.txt"
  if [ -n "$raw" ]; then
    ${perf[@]+"${perf[@]}"} $TW mcast send md/X --group "$group" --count "$MSGS" --rate "$RATE" --print-json --raw >"$TMP/s.json"
    # A raw receiver waits for what never comes when a datagram was lost: bounded.
    sleep 1; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  else
    ${perf[@]+"${perf[@]}"} $TW mcast send md/X --group "$group" --count "$MSGS" --rate "$RATE" --print-json \
      ${loss[@]+"${loss[@]}"} --seed 7 --wait-receivers "$n" --linger 20s >"$TMP/s.json"
  fi
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  python3 - "$name" "$n" "$TMP" "${LOSS:-0}" <<'PY'
import json, sys, glob, statistics
name, n, tmp, loss = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = json.load(open(f"{tmp}/s.json"))
rs = []
for i in range(1, n + 1):
    try:
        rs.append(json.loads(open(f"{tmp}/r{i}.json").read() or "{}"))
    except json.JSONDecodeError:
        rs.append({})
p50 = statistics.median(r.get("latency_p50_us", float("nan")) for r in rs)
p99 = max(r.get("latency_p99_us", float("nan")) for r in rs)
line = f"{name:5} loss {float(loss)*100:3.0f}%  receivers {n}  sender CPU {s['cpu_ns_per_msg']:7.0f} ns/msg  one-way p50 {p50:8.1f} us  p99 {p99:9.1f} us"
try:
    f = [l.split(",") for l in open(f"{tmp}/perf.txt") if l.count(",") >= 2]
    t = {x[2]: float(x[0]) if x[0][:1].isdigit() else 0.0 for x in f}
    # perf stat reports user_time and system_time in ns (rusage, µs resolution).
    line += f"  (user {t['user_time'] / s['messages']:.0f}, sys {t['system_time'] / s['messages']:.0f} ns/msg)"
except (OSError, KeyError, ValueError):
    pass
line += f"  delivered {min(r.get('delivered', 0) for r in rs)}/{s['messages']}"
if name != "raw":
    ok = all(r.get("in_order") and r.get("lost") == 0 and r.get("delivered") == s["messages"] for r in rs)
    rec50 = max(r.get("recovery_p50_us", 0) for r in rs)
    rec99 = max(r.get("recovery_p99_us", 0) for r in rs)
    line += f"  all in order: {ok}  recovered {sum(r.get('recovered', 0) for r in rs)} (p50 {rec50:.0f} us, p99 {rec99:.0f} us)  retransmitted {s['retransmitted']}"
print(line, flush=True)
PY
}

echo "=== fan-out, no loss: $MSGS messages of 100 B at $RATE msg/s"
for n in 1 4 8; do
  run raw "$n"
  run mcast "$n"
done
for LOSS in 0.01 0.05; do
  echo "=== $(python3 -c "print(int($LOSS*100))")% seeded loss at the sender and at each receiver"
  for n in 1 4 8; do LOSS=$LOSS run mcast "$n"; done
done
