#!/usr/bin/env bash
# Runs QuickFIX/C++'s own acceptance-test scenarios (test/definitions/server: FIX.4.0 to
# FIX.5.0 SP2, about 470 scripted sessions) against `tickwire fix acceptor --app echo`,
# with QuickFIX's own Ruby runner (test/Runner.rb), as QuickFIX runs them against its
# `at` server (test/runat.sh): same CompIDs (ISLD/TW), same settings. The FIX.5.0 SP1
# and SP2 scenarios run twice: with the FIXT session configured for their version, and
# with runat.sh's one settings file (DefaultApplVerID=FIX.5.0): 587 runs in all.
#
# The scenarios are third-party files and are never committed: the script downloads
# Debian's QuickFIX source (the version its libquickfix-dev package is built from,
# checked against a pinned SHA-256) into target/quickfix-src/ once, and installs
# Ruby with apt-get when it is missing (root or sudo).
#
# Usage: scripts/quickfix-acceptance.sh [--tickwire BIN] [--out DIR] [PATTERN...]
#        scripts/quickfix-acceptance.sh --fetch-only   (Ruby and the scenarios, no run)
#   BIN      the tickwire binary (default: target/release/tickwire, else target/debug)
#   DIR      where the settings, the acceptor's output and the runner's XML report go
#            (default: a temporary directory, kept when something fails)
#   PATTERN  scenario files under test/definitions/server (default: every version,
#            fix4*/*.def fix50/*.def fix50sp1/*.def fix50sp2/*.def)
# Each FIX version's scenarios run against their own acceptor (a port the acceptor
# picks on 127.0.0.1), all versions at once (about a minute). Prints one line per
# failed scenario with the runner's reason and a summary
# "quickfix-acceptance: P passed, F failed of N"; exits 1 when any failed.
set -euo pipefail

QF_VERSION="1.15.1+dfsg"
QF_TARBALL="quickfix_${QF_VERSION}.orig.tar.gz"
QF_URL="http://deb.debian.org/debian/pool/main/q/quickfix/${QF_TARBALL}"
QF_SHA256="2f378b5c57f355bfb4c3d733b560b3b163baad9de113afd0e1325a814660f5c2"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin=""
out=""
fetch_only=0
patterns=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tickwire) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --fetch-only) fetch_only=1; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "quickfix-acceptance: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) patterns+=("$1"); shift ;;
  esac
done
[ "${#patterns[@]}" -gt 0 ] || patterns=("fix4*/*.def" "fix50/*.def" "fix50sp1/*.def" "fix50sp2/*.def")

# Ruby, for QuickFIX's runner.
if ! command -v ruby >/dev/null; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "quickfix-acceptance: need root or sudo to install ruby" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "quickfix-acceptance: installing ruby with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-cache show ruby >/dev/null 2>&1 || "${sudo[@]}" apt-get update -q >&2
  "${sudo[@]}" apt-get install -y -q --no-install-recommends ruby >&2
fi

# QuickFIX's sources (scenarios and runner), once.
src_root="$root/target/quickfix-src"
src="$src_root/quickfix-${QF_VERSION}.orig"
if [ ! -f "$src/test/Runner.rb" ]; then
  mkdir -p "$src_root"
  echo "quickfix-acceptance: downloading $QF_URL" >&2
  if command -v curl >/dev/null; then
    curl -fsS --retry 3 -m 120 -o "$src_root/$QF_TARBALL.part" "$QF_URL"
  else
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
      "$QF_URL" "$src_root/$QF_TARBALL.part"
  fi
  echo "$QF_SHA256  $src_root/$QF_TARBALL.part" | sha256sum -c --quiet -
  tar -xzf "$src_root/$QF_TARBALL.part" -C "$src_root"
  rm -f "$src_root/$QF_TARBALL.part"
fi

# QuickFIX's Reflector.rb stamps each <TIME> of a line with a clock reading of its own
# (one-second resolution): when a second ends between a line's SendingTime (52) and its
# OrigSendingTime (122), 122 is a second later than 52 and the session rejects the
# message ("SendingTime accuracy problem"), as QuickFIX's own engine would: one run in
# 587 failed so in CI (fix50sp2/2e_PossDupAlreadyReceived). One reading per line, as the
# scenarios mean: gsub instead of sub (every run; idempotent).
sed -i 's/message\.sub!("<TIME>", strtime)/message.gsub!("<TIME>", strtime)/' "$src/test/Reflector.rb"

spec="${TICKWIRE_FIX_SPEC:-$root/target/fix-spec}"
bash "$root/scripts/fetch-fix-spec.sh" "$spec" >&2

[ "$fetch_only" = 0 ] || exit 0

if [ -z "$bin" ]; then
  for b in "$root/target/release/tickwire" "$root/target/debug/tickwire"; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "quickfix-acceptance: no tickwire binary (build one: cargo build --release --locked -p tickwire, or pass --tickwire BIN)" >&2
  exit 2
fi
bin="$(realpath "$bin")"

keep=1
if [ -z "$out" ]; then
  out="$(mktemp -d -t tickwire-qf-at.XXXXXX)"
  keep=0
fi
mkdir -p "$out"

# QuickFIX's test/setup.sh settings with tickwire's paths; the FIXT session's
# DefaultApplVerID is the group's version, as QuickFIX's per-version runs set it.
# Port 0: the acceptor picks a free port and names it in its READY line.
write_cfg() { # dir port appl_ver_id
  cat > "$1/at.cfg" <<CFG
[DEFAULT]
ConnectionType=acceptor
SocketAcceptPort=$2
SocketAcceptHost=127.0.0.1
StartTime=00:00:00
EndTime=00:00:00
SenderCompID=ISLD
TargetCompID=TW
ResetOnLogon=Y
FileStorePath=$1/store
[SESSION]
BeginString=FIX.4.0
DataDictionary=$spec/FIX40.xml
[SESSION]
BeginString=FIX.4.1
DataDictionary=$spec/FIX41.xml
[SESSION]
BeginString=FIX.4.2
DataDictionary=$spec/FIX42.xml
[SESSION]
BeginString=FIX.4.3
DataDictionary=$spec/FIX43.xml
[SESSION]
BeginString=FIX.4.4
DataDictionary=$spec/FIX44.xml
[SESSION]
BeginString=FIXT.1.1
DefaultApplVerID=$3
TransportDataDictionary=$spec/FIXT11.xml
AppDataDictionary=$spec/FIX50.xml
AppDataDictionary.FIX.5.0SP1=$spec/FIX50SP1.xml
AppDataDictionary.FIX.5.0SP2=$spec/FIX50SP2.xml
CFG
}

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$keep" = 0 ] && [ "${status:-1}" = 0 ]; then rm -rf "$out"; fi
}
trap cleanup EXIT

# One group per directory of scenarios (one FIX version), each against its own
# acceptor on its own port, all at once: most of a scenario's time is waiting.
cd "$src/test"
declare -A group_defs=()
total_defs=0
for p in "${patterns[@]}"; do
  for f in definitions/server/$p; do
    [ -f "$f" ] || continue
    g="$(basename "$(dirname "$f")")"
    group_defs[$g]+="$f "
    total_defs=$((total_defs + 1))
  done
done
[ "$total_defs" -gt 0 ] || { echo "quickfix-acceptance: no scenario matches ${patterns[*]}" >&2; exit 2; }
echo "quickfix-acceptance: $total_defs scenarios in ${#group_defs[@]} groups against $bin (output in $out)" >&2

# Runs: GROUP:DEFAULTAPPLVERID. The FIX.5.0 SP1 and SP2 scenarios run twice: against
# an acceptor configured for their version, and against one configured FIX.5.0 as
# QuickFIX's runat.sh does (one settings file for every version), where the answer to
# their Logon must carry their DefaultApplVerID as QuickFIX's `at` application makes it.
runs=()
for g in $(printf '%s\n' "${!group_defs[@]}" | sort); do
  case "$g" in
    fix50sp1) runs+=("$g:FIX.5.0SP1" "$g:FIX.5.0") ;;
    fix50sp2) runs+=("$g:FIX.5.0SP2" "$g:FIX.5.0") ;;
    *) runs+=("$g:FIX.5.0") ;;
  esac
done
total_runs=0
runners=()
for run in "${runs[@]}"; do
  g="${run%%:*}"
  appl="${run#*:}"
  d="$out/$g-$appl"
  mkdir -p "$d"
  set -- ${group_defs[$g]}
  total_runs=$((total_runs + $#))
  write_cfg "$d" 0 "$appl"
  "$bin" fix acceptor --config "$d/at.cfg" --app echo --no-out >"$d/acceptor.out" 2>"$d/acceptor.err" &
  apid=$!
  pids+=("$apid")
  for _ in $(seq 1 100); do
    grep -q '^READY' "$d/acceptor.out" 2>/dev/null && break
    if ! kill -0 "$apid" 2>/dev/null; then
      echo "quickfix-acceptance: the $g acceptor exited before READY:" >&2
      cat "$d/acceptor.err" >&2
      exit 1
    fi
    sleep 0.1
  done
  grep -q '^READY' "$d/acceptor.out" || { echo "quickfix-acceptance: no READY from the $g acceptor in 10 s" >&2; exit 1; }
  # "READY acceptor 127.0.0.1:PORT"
  port="$(sed -n 's/^READY acceptor 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$d/acceptor.out" | head -n 1)"
  [ -n "$port" ] || { echo "quickfix-acceptance: no port in the $g acceptor's READY line" >&2; exit 1; }
  # shellcheck disable=SC2086 # the group's file list, split on purpose
  # The report names each scenario; the settings' version goes into its name.
  ruby -I. Runner.rb 127.0.0.1 "$port" ${group_defs[$g]} 2>"$d/runner.err" \
    | sed "s|<test name='definitions/server/\([^']*\)'|<test name='\1 [DefaultApplVerID=$appl]'|" >"$d/report.xml" &
  rpid=$!
  pids+=("$rpid")
  runners+=("$rpid")
done
# The runner's exit status is its failure count: the reports are the verdict.
for r in "${runners[@]}"; do wait "$r" || true; done

cat "$out"/*/report.xml > "$out/report.xml"
passed="$(grep -c "result='success'" "$out/report.xml" || true)"
failed="$(grep -c "result='failure'" "$out/report.xml" || true)"
total=$((passed + failed))
python3 - "$out/report.xml" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
for m in re.finditer(r"<test name='([^']*)' result='failure' >(.*?)</test>", text, re.S):
    body = m.group(2)
    reason = re.search(r"<message>\s*(.*?)\s*<", body, re.S)
    line = re.search(r"<line>(\d+)</line>", body)
    print("FAILED %s (line %s): %s" % (m.group(1),
          line.group(1) if line else "?", reason.group(1).strip() if reason else "?"))
PY
echo "quickfix-acceptance: $passed passed, $failed failed of $total"
status=0
[ "$failed" = 0 ] || status=1
if [ "$total" -ne "$total_runs" ]; then
  echo "quickfix-acceptance: the runners reported $total results for $total_runs scenario runs (see $out/*/runner.err)" >&2
  status=1
fi
exit "$status"
