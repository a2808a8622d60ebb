#!/usr/bin/env bash
# The spool behind one held message (docs/guaranteed.md, "Reclamation"): a queue `held`
# gets one guaranteed message nobody consumes, then 300,000 messages of 1 KB go through
# queue `work`, consumed and acknowledged. Prints the data directory's size every 10 s
# (reclamation runs every 10 s), then restarts the router from the spool and consumes
# the held message. The router runs with --sync page-cache (only the sizes matter here).
#
#     scripts/spool-held.sh target/release/tickwire
set -euo pipefail
BIN=${1:?usage: scripts/spool-held.sh TICKWIRE_BINARY}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
$BIN router --listen 127.0.0.1:0 --data-dir $D --sync page-cache > $D/r.out 2> $D/r.err &
RP=$!
sleep 1
ADDR=$(head -1 $D/r.out | awk '{print $NF}')
$BIN queue create held --sub 'h/>' --router $ADDR > /dev/null
$BIN queue create work --sub 'w/>' --router $ADDR > /dev/null
$BIN pub h/1 held-forever --guaranteed --router $ADDR > /dev/null
$BIN sub --queue work --router $ADDR > /dev/null 2>&1 &
SP=$!
$BIN pub w/x --guaranteed --count 300000 --size 1000 --router $ADDR 2>&1 | tail -1
for t in 10 20 30 40 50; do
  sleep 10
  echo "t+${t}s spool $(du -sm $D | cut -f1) MB  router RSS $(grep VmRSS /proc/$RP/status | awk '{print $2/1024}') MB"
done
$BIN queue show held --router $ADDR 2>&1 | grep -i -E "depth|messages" | head -3
kill $SP; kill $RP; wait $RP 2>/dev/null || true
# restart from the spool: the held message is still there
$BIN router --listen 127.0.0.1:0 --data-dir $D --sync page-cache > $D/r2.out 2> $D/r2.err &
RP=$!
sleep 2
ADDR=$(head -1 $D/r2.out | awk '{print $NF}')
timeout 10 $BIN sub --queue held --count 1 --router $ADDR 2>&1 | tail -2
kill $RP; wait $RP 2>/dev/null || true
