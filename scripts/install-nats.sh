#!/usr/bin/env bash
# Installs the NATS server and the NATS CLI (for `nats bench`) from the Go module proxy,
# for the side-by-side measurements in BENCHMARKS.md. Not needed by the tests.
set -euo pipefail
export GOBIN="${GOBIN:-$HOME/go/bin}"
command -v go >/dev/null || { echo "go is required (https://go.dev/dl)"; exit 1; }
[ -x "$GOBIN/nats-server" ] || go install github.com/nats-io/nats-server/v2@latest
[ -x "$GOBIN/nats" ] || go install github.com/nats-io/natscli/nats@latest
"$GOBIN/nats-server" --version
"$GOBIN/nats" --version
