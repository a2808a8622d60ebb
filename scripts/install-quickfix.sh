#!/usr/bin/env bash
# Installs QuickFIX/C++ from Debian (libquickfix-dev, QuickFIX 1.15.1) with g++ and make when
# they are missing, then builds tickwire's own QuickFIX tools (tools/quickfix/*.cpp) into
# target/quickfix/bin/, only when a source is newer than its binary.
#
# Used by the interop tests (QuickFIX as a real counterparty), by tools/quickfix/probe.py
# (records QuickFIX's behaviour) and by the tick-to-trade benchmark (the QuickFIX reference
# algo). Idempotent; meant to run as root on a fresh Debian machine in CI (it uses sudo
# for apt-get when not root and sudo exists).
#
# Environment: QUICKFIX_BIN_DIR overrides the output directory (default target/quickfix/bin).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src_dir="$root/tools/quickfix"
bin_dir="${QUICKFIX_BIN_DIR:-$root/target/quickfix/bin}"

missing=()
dpkg-query -W -f='${Status}' libquickfix-dev 2>/dev/null | grep -q "install ok installed" || missing+=(libquickfix-dev)
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
# QuickFIX's SSL headers include OpenSSL's (qf_peer's SSL acceptor/initiator); the TLS
# interop tests make RSA keys with the openssl CLI (QuickFIX 1.15.1 takes RSA or DSA only).
dpkg-query -W -f='${Status}' libssl-dev 2>/dev/null | grep -q "install ok installed" || missing+=(libssl-dev)
command -v openssl >/dev/null || missing+=(openssl)

if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-quickfix: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "install-quickfix: installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine may have no package lists yet.
  if ! apt-cache show libquickfix-dev >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -q
  fi
  "${sudo[@]}" apt-get install -y -q --no-install-recommends libquickfix-dev libssl-dev openssl g++ make
else
  echo "install-quickfix: libquickfix-dev, libssl-dev, openssl, g++ and make already present"
fi
echo "install-quickfix: QuickFIX $(dpkg-query -W -f='${Version}' libquickfix-dev)"

mkdir -p "$bin_dir"
# QuickFIX 1.15's headers use dynamic exception specifications: C++14 at most.
cxxflags=(-O2 -g -std=c++14 -Wall -Wextra -Wno-deprecated -Wno-deprecated-declarations)
built=0
for src in "$src_dir"/*.cpp; do
  name="$(basename "$src" .cpp)"
  out="$bin_dir/$name"
  if [ -x "$out" ] && [ "$out" -nt "$src" ] && [ "$out" -nt "$0" ]; then
    echo "install-quickfix: $out is up to date"
    continue
  fi
  echo "install-quickfix: building $out"
  g++ "${cxxflags[@]}" -o "$out.tmp" "$src" -lquickfix -lssl -lcrypto -lpthread
  mv "$out.tmp" "$out"
  built=$((built + 1))
done
echo "install-quickfix: done ($built built) in $bin_dir"
