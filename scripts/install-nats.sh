#!/usr/bin/env bash
# Installs the NATS server and NATS's own Go benchmark tool (nats-bench, from the
# nats.go examples) from the Go module proxy, for the side-by-side measurements in
# BENCHMARKS.md. Not needed by the tests.
set -euo pipefail
export GOBIN="${GOBIN:-$HOME/go/bin}"
command -v go >/dev/null || { echo "go is required"; exit 1; }
[ -x "$GOBIN/nats-server" ] || go install github.com/nats-io/nats-server/v2@latest
[ -x "$GOBIN/nats-bench" ] || go install github.com/nats-io/nats.go/examples/nats-bench@v1.11.0
"$GOBIN/nats-server" --version
echo "installed into $GOBIN: nats-server, nats-bench"
