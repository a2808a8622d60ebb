#!/usr/bin/env bash
# Installs the NATS server (a peer of the NATS side-by-side smoke test in
# crates/tickwire/tests/bench_fanout.rs, and of the measurements in BENCHMARKS.md) and
# NATS's own Go benchmark tool (nats-bench, from the nats.go examples, for
# BENCHMARKS.md only) from the Go module proxy into $GOBIN (default ~/go/bin).
#
# Idempotent: a tool already installed at the pinned version is left alone. `.ci/setup`
# runs it; the tests look for nats-server in $GOBIN, ~/go/bin and PATH.
#
#     scripts/install-nats.sh            # nats-server and nats-bench
#     scripts/install-nats.sh --server   # nats-server only (what CI needs)
set -euo pipefail

NATS_SERVER_VERSION="v2.15.2"
NATS_GO_VERSION="v1.11.0"

export GOBIN="${GOBIN:-$HOME/go/bin}"
# The Go tarball install puts go in /usr/local/go/bin, not always on PATH.
[ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null 2>&1; then
    echo "error: go is required to install nats-server (from the Go module proxy)" >&2
    exit 1
fi

server_only=false
[ "${1:-}" = "--server" ] && server_only=true

installed=""
if [ -x "$GOBIN/nats-server" ]; then
    installed="$("$GOBIN/nats-server" --version 2>/dev/null | awk '{print $2}')"
fi
if [ "$installed" = "$NATS_SERVER_VERSION" ]; then
    echo "    nats-server ${NATS_SERVER_VERSION}: already installed in $GOBIN"
else
    echo "    nats-server: installing ${NATS_SERVER_VERSION} into $GOBIN (was: ${installed:-none})"
    go install "github.com/nats-io/nats-server/v2@${NATS_SERVER_VERSION}"
fi
"$GOBIN/nats-server" --version

if ! $server_only; then
    if [ -x "$GOBIN/nats-bench" ]; then
        echo "    nats-bench (nats.go ${NATS_GO_VERSION} examples): already installed in $GOBIN"
    else
        echo "    nats-bench: installing from nats.go ${NATS_GO_VERSION} into $GOBIN"
        go install "github.com/nats-io/nats.go/examples/nats-bench@${NATS_GO_VERSION}"
    fi
fi
