#!/usr/bin/env bash
# Issue 17's bar: fan-out p99 with the router's monitoring endpoint on and polled every
# 100 ms, against monitoring off, in alternating pairs in one window (noise hits both).
#
#     scripts/bench-monitoring.sh [PAIRS] [BIN]     # default 5 pairs, target/release/tickwire
#
# Writes OUT/{off,on}-N.{txt,json} (OUT defaults to target/monitoring) and prints each
# pair's p99 and ratio, then the median ratio. Bounded: PAIRS x 2 runs of 8 s each.
set -u
pairs=${1:-5}; bin=${2:-target/release/tickwire}; out=${OUT:-target/monitoring}
# SCALE: pattern 1's scale (0.2 on a quiet machine; lower when the machine is shared).
scale=${SCALE:-0.2}
mkdir -p "$out"
common=(bench fanout --preset pattern1 --scale "$scale" --duration 6 --warmup 2 --pin 1,0 --idle block)
# The report's summary line: "tickwire: p50 X µs, p99 Y µs, ...".
p99() { sed -n 's/^tickwire: p50 [0-9.]* µs, p99 \([0-9.]*\) µs.*/\1/p' "$1" | head -1; }
# The p99 of the measured seconds no host stall touched (docs/benchmarking.md).
sf99() { sed -n 's/^stall-free: .* p99 \([0-9.]*\) µs.*/\1/p' "$1" | head -1; }
ratios=(); sf_ratios=()
for n in $(seq 1 "$pairs"); do
    "$bin" "${common[@]}" --json "$out/off-$n.json" > "$out/off-$n.txt" 2>&1
    "$bin" "${common[@]}" --monitor-poll-ms 100 --json "$out/on-$n.json" > "$out/on-$n.txt" 2>&1
    off=$(p99 "$out/off-$n.txt"); on=$(p99 "$out/on-$n.txt")
    if grep -q INVALID "$out/off-$n.txt" "$out/on-$n.txt"; then
        echo "pair $n: INVALID run (saturated?), left out: see $out/{off,on}-$n.txt"; continue
    fi
    r=$(python3 -c "print(f'{$on/$off:.3f}')")
    ratios+=("$r")
    echo "pair $n: p99 off ${off} µs, on ${on} µs, on/off ${r}; $(grep -h '^monitoring:' "$out/on-$n.txt")"
    soff=$(sf99 "$out/off-$n.txt"); son=$(sf99 "$out/on-$n.txt")
    if [ -n "$soff" ] && [ -n "$son" ]; then
        sr=$(python3 -c "print(f'{$son/$soff:.3f}')")
        sf_ratios+=("$sr")
        echo "        stall-free seconds: p99 off ${soff} µs, on ${son} µs, on/off ${sr}"
    else
        echo "        stall-free seconds: none on one side"
    fi
done
printf '%s\n' "${ratios[@]}" | sort -n | python3 -c 'import sys; v=[float(l) for l in sys.stdin]; print(f"median on/off p99 ratio over {len(v)} pairs: {sorted(v)[len(v)//2]:.3f}")'
if [ ${#sf_ratios[@]} -gt 0 ]; then
    printf '%s\n' "${sf_ratios[@]}" | sort -n | python3 -c 'import sys; v=[float(l) for l in sys.stdin]; print(f"median on/off p99 ratio of the stall-free seconds over {len(v)} pairs: {sorted(v)[len(v)//2]:.3f}")'
fi
