#!/usr/bin/env bash
# Fan-out through two routers that differ in one setting, alternating A and B run by run,
# and the median p50/p99 ratios B/A: over all pairs, over the pairs in which the host
# took no CPU away from this machine (the bench's sentinel, crates/bench/src/host_watch.rs),
# and over each run's stall-free seconds (the report's "stall-free:" line).
#
#     scripts/bench-fanout-pairs.sh PAIRS "ROUTER FLAGS A" "ROUTER FLAGS B" [BENCH FLAGS...]
#
# Example (issue 14: the last-value cache on every topic vs none):
#
#     scripts/bench-fanout-pairs.sh 8 "--no-guaranteed --idle block" \
#         "--no-guaranteed --idle block --cache >" --preset pattern1 --scale 0.1 --duration 4 --warmup 1
#
# TICKWIRE (default target/release/tickwire) is the binary; OUT (default target/pairs) gets
# each run's report and JSON. Both routers run for the whole session (ports 7661, 7662).
# NICE (default 0) runs the routers and the benches at that nice level: -20 keeps other
# work on a shared machine (compiles) from taking their CPU, without realtime starvation.
set -euo pipefail
pairs=$1; flags_a=$2; flags_b=$3; shift 3
bin=${TICKWIRE:-target/release/tickwire}
nice=${NICE:-0}
out=${OUT:-target/pairs}
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
# shellcheck disable=SC2086 # the flags are words on purpose
nice -n "$nice" "$bin" router --listen 127.0.0.1:7661 $flags_a > "$out/router-a.log" 2>&1 & pids+=($!)
# shellcheck disable=SC2086
nice -n "$nice" "$bin" router --listen 127.0.0.1:7662 $flags_b > "$out/router-b.log" 2>&1 & pids+=($!)
sleep 1
for i in $(seq 1 "$pairs"); do
    for side in a b; do
        port=7661; [ "$side" = b ] && port=7662
        nice -n "$nice" "$bin" bench fanout --router "127.0.0.1:$port" "$@" --json "$out/$side-$i.json" \
            > "$out/$side-$i.txt" 2>&1 || echo "run $side-$i failed: see $out/$side-$i.txt"
    done
done
python3 - "$out" "$pairs" <<'EOF'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
rows = []
for i in range(1, pairs + 1):
    try:
        a, b = (json.load(open(f"{out}/{s}-{i}.json")) for s in "ab")
    except (OSError, ValueError):
        continue
    stalls = lambda r: (r.get("host") or {}).get("count", 0)
    longest = max((r.get("host") or {}).get("longest_ms", 0) for r in (a, b))
    rows.append((i, a["latency"], b["latency"], stalls(a) + stalls(b), longest))
print("pair  p50 A   p50 B   p99 A     p99 B     B/A p99  host stalls (longest ms)")
for i, la, lb, st, lo in rows:
    print(f"{i:>4} {la['p50_us']:>7.1f} {lb['p50_us']:>7.1f} {la['p99_us']:>9.1f} {lb['p99_us']:>9.1f} {lb['p99_us']/la['p99_us']:>8.2f}  {st} ({lo:.0f})")
def med(sel, label):
    if not sel:
        print(f"{label}: no pairs"); return
    r50 = statistics.median(lb['p50_us'] / la['p50_us'] for _, la, lb, _, _ in sel)
    r99 = statistics.median(lb['p99_us'] / la['p99_us'] for _, la, lb, _, _ in sel)
    print(f"{label} ({len(sel)} pairs): median B/A p50 {r50:.2f}x, p99 {r99:.2f}x; "
          f"median p99 A {statistics.median(x[1]['p99_us'] for x in sel):.1f} µs, "
          f"B {statistics.median(x[2]['p99_us'] for x in sel):.1f} µs")
med(rows, "all pairs")
med([r for r in rows if r[3] == 0], "pairs without a host stall")
# The stall-free seconds of every run (the bench's "stall-free:" line): each run's
# latency over its measured seconds that no host stall touched, whatever the pair.
sf = []
for i in range(1, pairs + 1):
    try:
        fa, fb = (json.load(open(f"{out}/{s}-{i}.json")).get("stall_free") or {} for s in "ab")
    except (OSError, ValueError):
        continue
    la, lb = fa.get("latency"), fb.get("latency")
    if la and lb and la["p99_us"] > 0:
        sf.append((i, dict(la, seconds=fa["seconds"], of=fa["of"]), dict(lb, seconds=fb["seconds"], of=fb["of"])))
if sf:
    print("pair  stall-free seconds A, B   p99 A     p99 B     B/A p99")
    for i, a, b in sf:
        print(f"{i:>4}  {a['seconds']}/{a['of']}, {b['seconds']}/{b['of']}"
              f"{'':>14}{a['p99_us']:>9.1f} {b['p99_us']:>9.1f} {b['p99_us']/a['p99_us']:>8.2f}")
    print(f"stall-free seconds ({len(sf)} pairs with both sides kept): median B/A p99 "
          f"{statistics.median(b['p99_us'] / a['p99_us'] for _, a, b in sf):.2f}x, "
          f"p50 {statistics.median(b['p50_us'] / a['p50_us'] for _, a, b in sf):.2f}x")
else:
    print("stall-free seconds: no pair had stall-free seconds on both sides")
EOF
