#!/usr/bin/env bash
# Installs the peers of the monitoring tests (crates/tickwire/tests/monitor.rs) from
# Debian: Chromium (the dashboard test drives it headless over the DevTools protocol,
# through the headless_chrome crate) and promtool (package `prometheus`: the test runs
# `promtool check metrics` on /metrics). Idempotent; uses sudo for apt-get when not
# root. Under CI=true a missing peer fails those tests, it never skips them.
set -euo pipefail

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v promtool >/dev/null || missing+=(prometheus)

if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-monitoring-peers: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "install-monitoring-peers: installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache show chromium >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -q
  fi
  "${sudo[@]}" apt-get install -y -q "${missing[@]}"
else
  echo "install-monitoring-peers: chromium and promtool already present"
fi
chromium --version 2>/dev/null | head -1 || true
promtool --version 2>&1 | head -1
