#!/usr/bin/env bash
# Issue 20's permissions bar: fan-out p99 with 1,000 permission rules on the identity
# the bench's clients connect as, against no rules, in alternating pairs
# (scripts/bench-fanout-pairs.sh: same window, so noise hits both sides).
#
#     scripts/bench-permissions.sh [PAIRS] [SCALE]     # default 5 pairs, pattern 1 at 0.2
#
# Router A has no [auth] table. Router B reads OUT/rules.toml: anonymous clients (the
# bench's) get 1,000 publish and 1,000 subscribe patterns, each list 900 allows and 100
# denies, the one allow that admits the bench's topics (`t/>`) last, so a decision
# made per message would walk every rule. Permissions are decided once per
# subscription and once per topic per connection (docs/security.md): the bar is B/A
# p99 within 1.05x. TICKWIRE, OUT and NICE as for bench-fanout-pairs.sh.
set -euo pipefail
pairs=${1:-5}; scale=${2:-0.2}
out=${OUT:-target/permissions}
mkdir -p "$out"
rules="$out/rules.toml"
python3 - "$rules" <<'PY'
import sys
def lists(kind):
    allow = [f'"{kind}{i}/feed/>"' for i in range(899)] + ['"t/>"']
    deny = [f'"t/x{i}"' for i in range(100)]
    return "{ allow = [" + ", ".join(allow) + "], deny = [" + ", ".join(deny) + "] }"
with open(sys.argv[1], "w") as f:
    f.write("# 1,000 publish and 1,000 subscribe rules for anonymous clients (scripts/bench-permissions.sh)\n")
    f.write("[auth]\nanonymous = \"allow\"\n[auth.anonymous_rules]\nadmin = true\n")
    f.write(f"publish = {lists('p')}\nsubscribe = {lists('s')}\n")
PY
# Check that router B would enforce them: a publish to a denied topic must be refused.
bin=${TICKWIRE:-target/release/tickwire}
"$bin" router --listen 127.0.0.1:7669 --no-guaranteed --config "$rules" > "$out/check.log" 2>&1 &
check=$!
sleep 0.5
if "$bin" pub --router 127.0.0.1:7669 t/x5 denied 2> "$out/check.err"; then
    kill "$check"; echo "bench-permissions: the rules were not enforced (a publish to t/x5 went through)" >&2; exit 1
fi
kill "$check"; wait "$check" 2>/dev/null || true
grep -q "permission-denied" "$out/check.err" || { cat "$out/check.err" >&2; exit 1; }
echo "rules enforced: $(cat "$out/check.err")"
OUT="$out" exec "$(dirname "$0")/bench-fanout-pairs.sh" "$pairs" \
    "--no-guaranteed --idle block" \
    "--no-guaranteed --idle block --config $rules" \
    --preset pattern1 --scale "$scale" --duration 6 --warmup 2 --pin 1,0
