#!/usr/bin/env bash
# Fetch the standard QuickFIX data dictionaries (spec/*.xml) for the FIX tests.
#
# They are third-party files and are never committed: this script downloads the
# `quickfix` source package from PyPI and extracts only spec/*.xml into
# target/fix-spec/ under the repository root (gitignored). It is idempotent: when
# every dictionary is already there it does nothing.
#
# Usage: scripts/fetch-fix-spec.sh [--user | DEST_DIR]
#   DEST_DIR defaults to $TICKWIRE_FIX_SPEC when set, else <repo>/target/fix-spec of
#   the checkout this script is in. --user writes to the per-user data directory
#   (${XDG_DATA_HOME:-~/.local/share}/tickwire/fix-spec), where an installed `tickwire`
#   run from anywhere looks (crates/rt/src/paths.rs).
set -euo pipefail

QUICKFIX_VERSION=1.16.0
FILES="FIX40.xml FIX41.xml FIX42.xml FIX43.xml FIX44.xml FIX50.xml FIX50SP1.xml FIX50SP2.xml FIXT11.xml"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = "--user" ]; then
    dest="${XDG_DATA_HOME:-$HOME/.local/share}/tickwire/fix-spec"
elif [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
    sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
elif [ -n "${1:-}" ]; then
    dest="$1"
elif [ -n "${TICKWIRE_FIX_SPEC:-}" ]; then
    dest="$TICKWIRE_FIX_SPEC"
elif [ -f "$repo_root/Cargo.toml" ] && [ -d "$repo_root/crates/rt" ]; then
    dest="$repo_root/target/fix-spec"
else
    dest="${XDG_DATA_HOME:-$HOME/.local/share}/tickwire/fix-spec"
fi

missing=0
for f in $FILES; do
    [ -s "$dest/$f" ] || missing=1
done
if [ "$missing" = 0 ]; then
    echo "fetch-fix-spec: dictionaries already present in $dest, nothing to do"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "fetch-fix-spec: downloading quickfix==$QUICKFIX_VERSION source package from PyPI"
python3 -m pip download "quickfix==$QUICKFIX_VERSION" --no-deps --no-binary :all: \
    --disable-pip-version-check -q -d "$work" >&2

archive="$(ls "$work"/quickfix-*.tar.gz 2>/dev/null | head -n 1)"
if [ -z "$archive" ]; then
    echo "fetch-fix-spec: no quickfix source archive was downloaded" >&2
    exit 1
fi

mkdir -p "$work/x"
tar -xzf "$archive" -C "$work/x" --wildcards "*/spec/*.xml"

# Install atomically per file so a concurrent reader never sees a half-written file.
mkdir -p "$dest"
for f in $FILES; do
    src="$(find "$work/x" -path "*/spec/$f" | head -n 1)"
    if [ -z "$src" ]; then
        echo "fetch-fix-spec: $f not found in $archive" >&2
        exit 1
    fi
    cp "$src" "$dest/.$f.tmp.$$"
    mv -f "$dest/.$f.tmp.$$" "$dest/$f"
done
echo "fetch-fix-spec: extracted $(echo $FILES | wc -w) dictionaries from $(basename "$archive") into $dest"
