#!/usr/bin/env bash
# What a queue consumer's window costs the router: N guaranteed messages are stored in
# a queue, then `tickwire sub --queue` consumes and acknowledges them all through a
# window of 64, 4,096 and 65,536 in-flight messages. The time should not grow with the
# window (an acknowledgement once scanned the whole in-flight list: 65,536 took ~25x
# longer than 64). Not a latency benchmark: seconds for the whole consumption.
#
#   scripts/bench-consumer-window.sh [BINARY] [N] [RUNS]
#   (defaults: target/release/tickwire, 200000 messages, 3 runs)
set -euo pipefail
BIN=${1:-target/release/tickwire}
N=${2:-200000}
RUNS=${3:-3}
dir=$(mktemp -d)
trap 'kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$BIN" router --listen 127.0.0.1:0 --sync page-cache --data-dir "$dir/spool" >"$dir/out" 2>"$dir/err" &
rpid=$!
for _ in $(seq 50); do
    [ -s "$dir/out" ] && break
    sleep 0.1
done
addr=$(head -1 "$dir/out" | awk '{print $NF}')
[ -n "$addr" ] || { echo "the router did not start: $(cat "$dir/err")" >&2; exit 1; }
for run in $(seq "$RUNS"); do
    line="run $run:"
    for w in 64 4096 65536; do
        q="w$w-r$run"
        "$BIN" queue create --router "$addr" "$q" --sub "$q" >/dev/null
        "$BIN" pub --router "$addr" --guaranteed --count "$N" --size 10 --rate 0 "$q" >/dev/null 2>&1
        s=$(date +%s.%N)
        timeout 300 "$BIN" sub --router "$addr" --queue "$q" --window "$w" --count "$N" --quiet >/dev/null 2>&1
        e=$(date +%s.%N)
        line="$line window $w $(echo "$e - $s" | bc | sed 's/^\./0./') s;"
    done
    echo "$line"
done
