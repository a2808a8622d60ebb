#!/usr/bin/env bash
# The mixed claim of issue 13: direct pattern-1 traffic alone, then again while
# `bench guaranteed` sends guaranteed messages to the same router; direct p99 with and
# without, per pair, and the ratio (the bar is <= 1.2x); at the end the median ratio over
# all pairs, over the pairs without a host CPU stall (see the fan-out report's `host:`),
# and of the runs' stall-free seconds (the report's `stall-free:`).
#
#   scripts/bench-guaranteed-mixed.sh [RUNS] [SCALE] [GM_RATE] [SYNC]
#   (defaults: 3 pairs, pattern1 --scale 0.2, 135k guaranteed msg/s, fsync)
#
# Layout (2 cores): the router alone on CPU 0 (idle block), both measuring processes
# on CPU 1 (ROUTER_IDLE=hybrid|spin changes the router's idle strategy). Needs a release
# build: cargo build --release -p tickwire.
set -euo pipefail
RUNS=${1:-3}
SCALE=${2:-0.2}
GM_RATE=${3:-135k}
SYNC=${4:-fsync}
BIN=${TICKWIRE:-target/release/tickwire}
# SPOOL_CPU=1 pins the router's spool storage thread to CPU 1 (router --spool-cpu).
SPOOL_ARGS=()
[ -n "${SPOOL_CPU:-}" ] && SPOOL_ARGS=(--spool-cpu "$SPOOL_CPU")
OUT=${OUT:-target/bench-guaranteed-mixed}
mkdir -p "$OUT"
DATA=$(mktemp -d "${TMPDIR:-/tmp}/tickwire-mixed-XXXXXX")
taskset -c 0 "$BIN" router --listen 127.0.0.1:0 --idle "${ROUTER_IDLE:-block}" --data-dir "$DATA" --sync "$SYNC" "${SPOOL_ARGS[@]}" \
  >"$OUT/router.out" 2>"$OUT/router.err" &
ROUTER=$!
cleanup() { kill "$ROUTER" 2>/dev/null || true; wait "$ROUTER" 2>/dev/null || true; rm -rf "$DATA"; }
trap cleanup EXIT
for _ in $(seq 100); do grep -q 'listening on' "$OUT/router.out" 2>/dev/null && break; sleep 0.1; done
ADDR=$(sed -n 's/.*listening on //p' "$OUT/router.out" | head -1)
echo "router pid $ROUTER at $ADDR (CPU 0, idle block, --sync $SYNC, data $DATA)"

FANOUT=(bench fanout --preset pattern1 --scale "$SCALE" --duration 6 --warmup 2 --pin 1,0 --router "$ADDR")
# The guaranteed run covers the whole fan-out run (8 s) with a second to spare each side.
GM=(bench guaranteed --router "$ADDR" --rate "$GM_RATE" --warmup 1s --duration 10s)

# CPU seconds (user+system) used by each of the router's threads so far, one per line:
# "name seconds".
router_cpu() {
  local hz t
  hz=$(getconf CLK_TCK)
  for t in /proc/"$ROUTER"/task/*; do
    awk -v hz="$hz" -v name="$(cat "$t/comm")" '{sub(/^.*\) /,""); printf "%s %.2f\n", name, ($12+$13)/hz}' "$t/stat"
  done
}
# The router's CPU use between two router_cpu snapshots, per thread, in % of one core.
cpu_delta() {
  paste -d' ' "$1" "$2" | awk -v s="$3" '{printf "%s %.0f%%  ", $1, 100*($4-$2)/s}'
}
p99() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['latency']['p99_us'])" "$1"; }
# The p99 of the run's measured seconds no host stall touched ("" when none was).
sf99() { python3 -c "import json,sys; l=(json.load(open(sys.argv[1])).get('stall_free') or {}).get('latency'); print(l['p99_us'] if l else '')" "$1"; }
: >"$OUT/pairs"
for r in $(seq "$RUNS"); do
  router_cpu >"$OUT/cpu0"; T0=$(date +%s.%N)
  "$BIN" "${FANOUT[@]}" --json "$OUT/alone-$r.json" >"$OUT/alone-$r.txt" 2>&1 || echo "alone run $r: exit $?"
  router_cpu >"$OUT/cpu1"; T1=$(date +%s.%N)
  CPU_ALONE=$(cpu_delta "$OUT/cpu0" "$OUT/cpu1" "$(echo "$T1 - $T0" | bc)")
  taskset -c 1 "$BIN" "${GM[@]}" --json "$OUT/gm-$r.json" >"$OUT/gm-$r.txt" 2>&1 &
  GMPID=$!
  sleep 1.5
  router_cpu >"$OUT/cpu0"; T0=$(date +%s.%N)
  "$BIN" "${FANOUT[@]}" --json "$OUT/mixed-$r.json" >"$OUT/mixed-$r.txt" 2>&1 || echo "mixed run $r: exit $?"
  router_cpu >"$OUT/cpu1"; T1=$(date +%s.%N)
  CPU_MIXED=$(cpu_delta "$OUT/cpu0" "$OUT/cpu1" "$(echo "$T1 - $T0" | bc)")
  wait "$GMPID" || echo "guaranteed run $r: exit $?"
  A=$(p99 "$OUT/alone-$r.json"); M=$(p99 "$OUT/mixed-$r.json")
  G=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['reconciliation']; print(f\"gm published {d['achieved_publish_rate']:.0f} acked {d['acked_rate']:.0f} msg/s ack p99 {d['ack_latency']['p99_us']:.0f} us lossless {r['lossless']}\")" "$OUT/gm-$r.json")
  STALLS=$(python3 -c "import json,sys; print(sum((json.load(open(f)).get('host') or {}).get('count',0) for f in sys.argv[1:]))" "$OUT/alone-$r.json" "$OUT/mixed-$r.json")
  python3 -c "import sys; a,m=float(sys.argv[1]),float(sys.argv[2]); print(f'run {sys.argv[3]}: direct p99 alone {a:.1f} us, with guaranteed {m:.1f} us: {m/a:.2f}x (host stalls in the pair: {sys.argv[4]})')" "$A" "$M" "$r" "$STALLS"
  SA=$(sf99 "$OUT/alone-$r.json"); SM=$(sf99 "$OUT/mixed-$r.json")
  if [ -n "$SA" ] && [ -n "$SM" ]; then
    python3 -c "import sys; a,m=float(sys.argv[1]),float(sys.argv[2]); print(f'       stall-free seconds: direct p99 alone {a:.1f} us, with guaranteed {m:.1f} us: {m/a:.2f}x')" "$SA" "$SM"
  else
    echo "       stall-free seconds: none on one side"; SA=-; SM=-
  fi
  echo "$r $A $M $STALLS $SA $SM" >>"$OUT/pairs"
  echo "       $G"
  echo "       router CPU alone: $CPU_ALONE"
  echo "       router CPU mixed: $CPU_MIXED"
done
# Medians over all pairs, and over the pairs in which the host took no CPU away from this
# machine (the fan-out bench's sentinel: crates/bench/src/host_watch.rs).
python3 - "$OUT/pairs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def med(sel, label):
    if not sel:
        print(f"{label}: no pairs"); return
    r = statistics.median(float(x[2]) / float(x[1]) for x in sel)
    print(f"{label} ({len(sel)}): median direct p99 ratio with/without guaranteed {r:.2f}x")
med(rows, "all pairs")
med([x for x in rows if x[3] == "0"], "pairs without a host stall")
sf = [x for x in rows if len(x) > 5 and x[4] != "-"]
if sf:
    r = statistics.median(float(x[5]) / float(x[4]) for x in sf)
    print(f"stall-free seconds ({len(sf)} pairs): median direct p99 ratio with/without guaranteed {r:.2f}x")
PY
echo "files: $OUT"
