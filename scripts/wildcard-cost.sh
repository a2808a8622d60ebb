#!/usr/bin/env bash
# The wildcard-cost attack of issue 12 item 3: one subscriber holding NPATTERNS distinct
# patterns that all match one 4-level topic, one publisher at full speed, on a router
# this script starts (idle block, a random loopback port). Prints the subscriber's rate.
#
#     scripts/wildcard-cost.sh target/release/tickwire 10000 200000
#     scripts/wildcard-cost.sh target/release/tickwire 1 200000      # the baseline
set -u
bin=$1; np=$2; count=$3; port=$((20000 + RANDOM % 20000))
python3 - "$np" > "${TMPDIR:-/tmp}/tw-patterns.txt" <<'PY'
import itertools, sys
n = int(sys.argv[1]); lv = "a" * 10
choices = [lv, "*"] + ["a" * k + "*" for k in range(1, 10)]
out = []
for combo in itertools.product(choices, repeat=4):
    out.append("/".join(combo))
    if len(out) == n:
        break
print("\n".join(out))
PY
# 10,000 overlapping patterns of one client: the skip of delivered clients keeps the walk
# short, but the router's worst-case bound (max_match_work) counts them all.
$bin router --listen 127.0.0.1:$port --idle block --no-guaranteed --max-match-work 100000 > "${TMPDIR:-/tmp}/tw-wild-router.log" 2>&1 &
rpid=$!
sleep 0.5
mapfile -t pats < "${TMPDIR:-/tmp}/tw-patterns.txt"
$bin sub --router 127.0.0.1:$port --count $count --quiet "${pats[@]}" > "${TMPDIR:-/tmp}/tw-wild-sub.log" 2>&1 &
spid=$!
sleep 3
t0=$(date +%s.%N)
timeout 120 $bin pub aaaaaaaaaa/aaaaaaaaaa/aaaaaaaaaa/aaaaaaaaaa --router 127.0.0.1:$port --count $count --size 100 --rate 0 > "${TMPDIR:-/tmp}/tw-wild-pub.log" 2>&1
timeout 120 tail --pid=$spid -f /dev/null
t1=$(date +%s.%N)
kill $rpid 2>/dev/null; wait $rpid 2>/dev/null
echo "$bin patterns=$np count=$count: $(python3 -c "print(f'{$count/($t1-$t0):,.0f} msg/s end to end')") sub: $(tail -1 "${TMPDIR:-/tmp}/tw-wild-sub.log")"
