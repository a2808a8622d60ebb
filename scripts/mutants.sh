#!/usr/bin/env bash
# Mutation testing of the pure cores with cargo-mutants, each with its own crate's
# tests. CPU heavy (one build + test run per mutant): NOT part of the default test run
# or of CI. See docs/testing.md for what it proves and the recorded results.
#
#     cargo install cargo-mutants --locked       # once
#     scripts/mutants.sh                          # every scope, every mutant
#     scripts/mutants.sh router feed              # chosen scopes
#     SHARD=1/8 scripts/mutants.sh router         # every 8th mutant (round-robin sample)
#
# Scopes: wire (crates/wire), router (core.rs, egress.rs, index.rs), fix-session
# (crates/fix/src/session.rs and session/), feed (crates/md/src/feed.rs).
# Environment: JOBS (default 1), TIMEOUT (seconds per test run, default 300), SHARD,
# MUTANTS_ARGS (more cargo-mutants flags, e.g. --in-place in a throwaway copy of the
# tree, so that the scopes share one build directory).
# Output: target/mutants/<scope>/mutants.out/{caught,missed,timeout,unviable}.txt
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "error: cargo-mutants is not installed: cargo install cargo-mutants --locked" >&2
    exit 1
fi

JOBS="${JOBS-1}"   # empty: no --jobs (required with --in-place, which is serial)
TIMEOUT="${TIMEOUT:-300}"
scopes=("$@")
[ "${#scopes[@]}" -eq 0 ] && scopes=(wire router fix-session feed)

args_for() {
    case "$1" in
        wire) echo "-p tickwire-wire" ;;
        router) echo "-p tickwire-router -f crates/router/src/core.rs -f crates/router/src/egress.rs -f crates/router/src/index.rs" ;;
        fix-session) echo "-p tickwire-fix -f crates/fix/src/session.rs -f crates/fix/src/session/**" ;;
        feed) echo "-p tickwire-md -f crates/md/src/feed.rs" ;;
        *) echo "unknown scope $1 (wire | router | fix-session | feed)" >&2; return 1 ;;
    esac
}

for scope in "${scopes[@]}"; do
    args=$(args_for "$scope")
    out="target/mutants/$scope"
    mkdir -p "$out"
    jobs=()
    [ -n "$JOBS" ] && jobs=(--jobs "$JOBS")
    shard=()
    [ -n "${SHARD:-}" ] && shard=(--shard "$SHARD" --sharding round-robin)
    echo "==> mutants: $scope ($args ${shard[*]}), jobs ${JOBS:-serial}, timeout ${TIMEOUT}s"
    # set -f: the -f globs are for cargo-mutants, not the shell.
    set -f
    # shellcheck disable=SC2086
    cargo mutants $args "${shard[@]}" "${jobs[@]}" --timeout "$TIMEOUT" \
        --output "$out" --no-shuffle ${MUTANTS_ARGS:-} || true
    set +f
    d="$out/mutants.out"
    if [ ! -f "$d/caught.txt" ]; then
        echo "==> $scope: cargo-mutants produced no results (see above)" >&2
        continue
    fi
    c=$(wc -l <"$d/caught.txt"); m=$(wc -l <"$d/missed.txt")
    t=$(wc -l <"$d/timeout.txt"); u=$(wc -l <"$d/unviable.txt")
    viable=$((c + m + t))
    pct=$([ "$viable" -gt 0 ] && echo "$((100 * c / viable))" || echo "-")
    echo "==> $scope: caught $c, missed $m, timeout $t, unviable $u: ${pct}% of $viable viable caught"
    [ "$m" -gt 0 ] && { echo "    missed:"; sed 's/^/      /' "$d/missed.txt"; }
done
