#!/usr/bin/env bash
# Issue 19 item 2: choose the market-data replay's layout (placement and idle
# strategies) by measurement. Runs `tickwire bench md-replay --speeds 4x --compare
# tickwire,raw` once per layout per round, the layouts alternating within each round so
# the machine's noise falls on all of them alike, and prints per layout the medians over
# the rounds of the end-to-end mean and p99, tickwire and the raw floor (which runs with
# the same placement and idle choices): over the whole runs, and over the seconds no host
# stall touched (the sentinel of docs/benchmarking.md; a round counts there when both of
# its runs kept some seconds).
#
#     scripts/bench-md-layouts.sh [ROUNDS] [MESSAGES]    # default 3 rounds, 300,000 messages
#
# Layouts (name: md-replay flags):
#   pin-spin-hybrid   --pin 0,1 --feed-idle spin  --router-idle hybrid   (FH alone on CPU 1)
#   pin-spin-block    --pin 0,1 --feed-idle spin  --router-idle block
#   pin-block-block   --pin 0,1 --feed-idle block --router-idle block
#   pin-rfar-block    --pin 0,1 --router-cpu far --feed-idle block --router-idle block
#                     (feed handler and router on CPU 1, exchange and clients on CPU 0)
#   free-spin-hybrid  --no-pin  --feed-idle spin  --router-idle hybrid   (the scheduler places all)
#   free-block-hybrid --no-pin  --feed-idle block --router-idle hybrid
#   free-block-block  --no-pin  --feed-idle block --router-idle block
# TICKWIRE (binary, default target/release/tickwire), OUT (default target/md-layouts),
# NICE (default 0) as for the other bench scripts.
set -euo pipefail
rounds=${1:-3}; messages=${2:-300000}
bin=${TICKWIRE:-target/release/tickwire}
nice=${NICE:-0}
out=${OUT:-target/md-layouts}
mkdir -p "$out"
[ -x "$bin" ] || { echo "no $bin: cargo build --release -p tickwire (or set TICKWIRE)" >&2; exit 2; }
declare -A flags=(
    [pin-spin-hybrid]="--pin 0,1 --feed-idle spin --router-idle hybrid"
    [pin-spin-block]="--pin 0,1 --feed-idle spin --router-idle block"
    [pin-block-block]="--pin 0,1 --feed-idle block --router-idle block"
    [pin-rfar-block]="--pin 0,1 --router-cpu far --feed-idle block --router-idle block"
    [free-spin-hybrid]="--no-pin --feed-idle spin --router-idle hybrid"
    [free-block-hybrid]="--no-pin --feed-idle block --router-idle hybrid"
    [free-block-block]="--no-pin --feed-idle block --router-idle block"
)
layouts=(pin-spin-hybrid pin-spin-block pin-block-block pin-rfar-block free-spin-hybrid free-block-hybrid free-block-block)
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, $(uname -r); $rounds rounds of ${#layouts[@]} layouts, $messages messages at 4x"
group="239.1.$(( ($$ >> 8) % 250 + 2 )).$(( $$ % 250 + 2 )):$(( 30000 + ($$ % 1000) * 20 ))"
for r in $(seq 1 "$rounds"); do
    for l in "${layouts[@]}"; do
        echo "round $r: $l (${flags[$l]})"
        # shellcheck disable=SC2086
        nice -n "$nice" "$bin" bench md-replay --speeds 4x --messages "$messages" --compare tickwire,raw \
            ${flags[$l]} --group "$group" --json "$out/$l-$r.json" > "$out/$l-$r.txt" 2>&1 \
            || echo "  exited $?: see $out/$l-$r.txt"
    done
done
python3 - "$out" "$rounds" "${layouts[@]}" <<'PY'
import json, statistics, sys
out, rounds, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
def pick(d, hop):
    return next((x for x in d["ratios"] if x["hop"] == hop), None)
for hop, title in (("end to end", "whole runs"), ("e2e stall-free", "seconds no host stall touched")):
    print(f"\nmedians over the rounds, end to end at 4x, {title} (µs); ratio = median of the per-round tickwire/raw")
    print(f"{'layout':<18} {'tickwire mean':>13} {'p99':>9} {'raw mean':>10} {'p99':>9} {'ratio mean':>11} {'p99':>6}  rounds  lossless")
    for l in layouts:
        rows = []
        for r in range(1, rounds + 1):
            try:
                d = json.load(open(f"{out}/{l}-{r}.json"))
            except (OSError, ValueError):
                continue
            e = pick(d, hop)
            if e and all(x is not None for x in e["ratio"]):
                rows.append((e["tickwire_us"], e["raw_us"], e["ratio"], all(x["lossless"] for x in d["results"])))
        if not rows:
            print(f"{l:<18} no report"); continue
        t = [x[0] for x in rows]; w = [x[1] for x in rows]; q = [x[2] for x in rows]
        print(f"{l:<18} {med(a[0] for a in t):>13,.0f} {med(a[2] for a in t):>9,.0f} {med(a[0] for a in w):>10,.0f} "
              f"{med(a[2] for a in w):>9,.0f} {med(a[0] for a in q):>10.2f}x {med(a[2] for a in q):>5.2f}x  "
              f"{len(rows):>6}  {sum(x[3] for x in rows)}/{len(rows)}")
PY
