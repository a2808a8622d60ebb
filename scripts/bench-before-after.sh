#!/usr/bin/env bash
# One run of each benchmark issue 11's "behaviour is unchanged" bar names, for one binary.
# Alternate two binaries to compare them in one window (BENCHMARKS.md, "before and after"):
#
#     for r in 1 2 3; do scripts/bench-before-after.sh before /path/old/tickwire $r
#                        scripts/bench-before-after.sh after  target/release/tickwire $r; done
#
# Writes OUT/LABEL-{pp,fo,t2t}-RUN.{txt,json} (OUT defaults to target/ab). The tick-to-trade
# part needs the FIX dictionaries (scripts/fetch-fix-spec.sh).
set -u
label=$1; bin=$2; run=$3; out=${OUT:-target/ab}
mkdir -p "$out"
"$bin" bench pingpong --sizes 100 --iterations 10000 --warmup 1000 --idle spin --pin 0,1 \
    --transports tcp,tickwire --json "$out/$label-pp-$run.json" > "$out/$label-pp-$run.txt" 2>&1
"$bin" bench fanout --preset pattern1 --scale 0.2 --duration 6 --warmup 2 --pin 1,0 --idle block \
    --json "$out/$label-fo-$run.json" > "$out/$label-fo-$run.txt" 2>&1
"$bin" bench tick-to-trade --compare builtin:block,raw:block --duration-scale 0.02 --warmup 2s \
    --pin 0,1 --json "$out/$label-t2t-$run.json" > "$out/$label-t2t-$run.txt" 2>&1
echo "$label run $run: $(grep -h 'tickwire p50 / raw TCP p50' "$out/$label-pp-$run.txt")"
echo "$label run $run: $(grep -h '^tickwire:' "$out/$label-fo-$run.txt")"
grep -h -A1 '^step' "$out/$label-t2t-$run.txt" | grep '^burst' | sed "s/^/$label run $run: t2t /"
