#!/usr/bin/env bash
# The market-data replay against its raw floor (issue 19's bar), repeated: RUNS runs of
#
#     tickwire bench md-replay --speeds 4x --pin 0,1 --compare tickwire,raw [FLAGS...]
#
# then, per hop and end to end, the median over the runs of tickwire's and the raw
# floor's mean, p50 and p99 and of the per-run tickwire/raw ratios, and the bar: end to
# end mean and p99 each within 2x of the floor, mean below 240 µs.
#
#     scripts/bench-md-replay.sh [RUNS] [BENCH FLAGS...]        # RUNS defaults to 3
#
# Example (one command for a quiet window):
#
#     cargo build --release -p tickwire && scripts/bench-md-replay.sh 3
#
# TICKWIRE (default target/release/tickwire) is the binary; OUT (default target/md-replay)
# gets each run's report (run-N.txt) and JSON (run-N.json). NICE (default 0) runs the
# bench at that nice level (-20 keeps compiles on a shared machine off its CPUs). The
# multicast group is this script's own (from its pid): loopback multicast is shared by
# every process on the host, and a concurrent replay on the default group would mix in.
set -euo pipefail
runs=${1:-3}
[ $# -gt 0 ] && shift
bin=${TICKWIRE:-target/release/tickwire}
nice=${NICE:-0}
out=${OUT:-target/md-replay}
mkdir -p "$out"
[ -x "$bin" ] || { echo "no $bin: cargo build --release -p tickwire (or set TICKWIRE)" >&2; exit 2; }
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, $(uname -r)"
group="239.1.$(( ($$ >> 8) % 250 + 2 )).$(( $$ % 250 + 2 )):$(( 30000 + ($$ % 1000) * 20 ))"
for i in $(seq 1 "$runs"); do
    echo "run $i / $runs: $bin bench md-replay --speeds 4x --pin 0,1 --compare tickwire,raw --group $group $*"
    nice -n "$nice" "$bin" bench md-replay --speeds 4x --pin 0,1 --compare tickwire,raw \
        --group "$group" "$@" --json "$out/run-$i.json" > "$out/run-$i.txt" 2>&1 \
        || echo "run $i exited $?: see $out/run-$i.txt"
done
files=()
for i in $(seq 1 "$runs"); do files+=("$out/run-$i.json"); done
python3 - "${files[@]}" <<'EOF'
import json, statistics, sys
docs = []
for path in sys.argv[1:]:
    try:
        docs.append(json.load(open(path)))
    except (OSError, ValueError) as e:
        print(f"{path}: no report ({e})")
if not docs:
    sys.exit(1)
for d in docs:
    lossless = all(r["lossless"] for r in d["results"])
    e2e = [r for r in d["ratios"] if r["hop"] == "end to end"]
    print("run: " + ("lossless" if lossless else "LOSS") + "; end to end tickwire mean/p99 " +
          ", ".join(f"{r['tickwire_us'][0]:.1f}/{r['tickwire_us'][2]:.1f} µs, raw "
                    f"{r['raw_us'][0]:.1f}/{r['raw_us'][2]:.1f} µs" for r in e2e))
med = statistics.median
hops = [r["hop"] for r in docs[0]["ratios"]]
print(f"\nmedians of {len(docs)} runs (µs; ratio = median of the per-run tickwire/raw):")
print(f"{'hop':<16} {'tickwire mean/p50/p99':>26} {'raw mean/p50/p99':>26} {'ratio mean/p50/p99':>22}")
rows = {}
for h in hops:
    rs = [r for d in docs for r in d["ratios"] if r["hop"] == h]
    t = [med(r["tickwire_us"][k] for r in rs) for k in range(3)]
    w = [med(r["raw_us"][k] for r in rs) for k in range(3)]
    q = [med(r["ratio"][k] for r in rs if r["ratio"][k] is not None) if any(r["ratio"][k] is not None for r in rs) else float("nan") for k in range(3)]
    rows[h] = (t, w, q)
    fmt = lambda v: "/".join(f"{x:.1f}" for x in v)
    print(f"{h:<16} {fmt(t):>26} {fmt(w):>26} {'/'.join(f'{x:.2f}' for x in q):>22}")
t, w, q = rows["end to end"]
print(f"\nbar: end-to-end mean within 2x of raw: {q[0]:.2f}x -> {'met' if q[0] <= 2 else 'NOT met'}; "
      f"p99 within 2x: {q[2]:.2f}x -> {'met' if q[2] <= 2 else 'NOT met'}; "
      f"mean below 240 µs: {t[0]:.1f} µs -> {'met' if t[0] < 240 else 'NOT met'}")
if "e2e stall-free" in rows:
    t, w, q = rows["e2e stall-free"]
    print(f"over the seconds no host stall touched: mean {q[0]:.2f}x of raw, p99 {q[2]:.2f}x; "
          f"tickwire mean {t[0]:.1f} µs (raw {w[0]:.1f} µs) against 240 µs")
EOF
