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
#
#     CALLGRIND=1 scripts/bench-permissions.sh [RUNS] [SCALE]   # default 3 runs at 0.01
#
# The same comparison as instructions, which the machine's noise does not touch: each
# router runs under valgrind's callgrind while `bench fanout` sends pattern 1 at SCALE
# through it, and the router's instructions in its event loop (`Router::run`, inclusive:
# reading, routing, writing; start-up and config parsing excluded) are divided by the
# messages published (also without the one-time decisions: once per SUBSCRIBE, and
# once per topic per connection for PUBLISH, `Perms::may_publish`). A and B alternate RUNS times; the medians
# and the B/A ratio are printed. valgrind cannot run rustix's vDSO set-up, so this mode
# uses a router built with `--cfg rustix_use_libc` (built into target/callgrind on first
# use; TICKWIRE_CG names another).
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
if [ "${CALLGRIND:-0}" = 1 ]; then
    runs=${1:-3}; cgscale=${2:-0.01}
    cg=${TICKWIRE_CG:-target/callgrind/release/tickwire}
    if [ ! -x "$cg" ]; then
        echo "building a router that runs under valgrind into target/callgrind (rustix_use_libc)"
        RUSTFLAGS="--cfg rustix_use_libc" cargo build --release --locked -p tickwire --target-dir target/callgrind
    fi
    command -v valgrind > /dev/null || { echo "bench-permissions: valgrind is not installed" >&2; exit 1; }
    for i in $(seq 1 "$runs"); do
        for side in a b; do
            extra=""; [ "$side" = b ] && extra="--config $rules"
            log="$out/cg-router-$side-$i.log"
            valgrind --tool=callgrind --callgrind-out-file="$out/cg-$side-$i.out" \
                "$cg" router --listen 127.0.0.1:7668 --no-guaranteed --idle block $extra > "$log" 2>&1 &
            router=$!
            for _ in $(seq 1 300); do grep -qs "listening on" "$log" && break; sleep 0.1; done
            grep -q "listening on" "$log" || { kill "$router"; cat "$log" >&2; exit 1; }
            "$bin" bench fanout --router 127.0.0.1:7668 --preset pattern1 --scale "$cgscale" \
                --duration 4 --warmup 1 --json "$out/cg-$side-$i.json" > "$out/cg-$side-$i.txt" 2>&1 \
                || { kill "$router"; cat "$out/cg-$side-$i.txt" >&2; exit 1; }
            kill -TERM "$router"; wait "$router" || true
        done
    done
    python3 - "$out" "$runs" <<'PY'
import json, re, statistics, subprocess, sys
out, runs = sys.argv[1], int(sys.argv[2])
def inclusive(path):
    """Router::run's instructions, and those of the decisions in it: once per
    SUBSCRIBE, and once per topic per connection for PUBLISH (the first message to a
    topic pays the rule scan; every later one a cache lookup)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", path],
                          capture_output=True, text=True, check=True).stdout
    run = sub = 0
    for line in text.splitlines():
        ir = line.split()[0].replace(",", "") if line.strip() else ""
        if not ir.isdigit():
            continue
        if re.search(r"driver::Router::run \[", line):
            run = int(ir)
        elif re.search(r"core::Core::may_subscribe \[", line) or re.search(r"auth::Perms::may_publish \[", line):
            sub += int(ir)
    if not run:
        sys.exit(f"no Router::run in {path}")
    return run, sub
per = {"a": [], "b": []}
print("run side  Router::run instructions  of which one-time decisions  published  deliveries  per message  per message, one-time decisions excluded")
for i in range(1, runs + 1):
    for side in "ab":
        run, sub = inclusive(f"{out}/cg-{side}-{i}.out")
        c = json.load(open(f"{out}/cg-{side}-{i}.json"))["counters"]
        if not c.get("reconciled"):
            sys.exit(f"run {side}-{i} did not reconcile: {c}")
        per[side].append((run / c["sent"], (run - sub) / c["sent"]))
        print(f"{i:>3} {side:>4} {run:>24,} {sub:>28,} {c['sent']:>10,} {c['received']:>11,} {run / c['sent']:>12,.0f} {(run - sub) / c['sent']:>38,.0f}")
for k, label in ((0, "per published message"), (1, "per published message, one-time decisions excluded")):
    a = statistics.median(x[k] for x in per["a"]); b = statistics.median(x[k] for x in per["b"])
    print(f"median instructions {label}: A (no rules) {a:,.0f}, B (1,000 + 1,000 rules) {b:,.0f}: B/A {b / a:.3f}x")
PY
    exit 0
fi
OUT="$out" exec "$(dirname "$0")/bench-fanout-pairs.sh" "$pairs" \
    "--no-guaranteed --idle block" \
    "--no-guaranteed --idle block --config $rules" \
    --preset pattern1 --scale "$scale" --duration 6 --warmup 2 --pin 1,0
