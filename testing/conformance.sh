#!/usr/bin/env bash
# Runs the Connect conformance suite (connectrpc.com/conformance v1.0.7,
# pinned in tools/go.mod) in server mode against the gateway: every
# Connect, gRPC and gRPC-Web case of the features the gateway declares in
# testing/cmd/conformance-gateway/config.yaml, over HTTP/1.1 and HTTP/2,
# cleartext and TLS, with the suite's reference server as the gRPC backend
# behind the gateway. The gateway is built with the race detector and
# stops at the first race. testing/test.sh runs it; it takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

# CONFORMANCE_BIN names a directory that already holds connectconformance
# and referenceserver (testing/test.sh builds them beside go vet).
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
if [ -n "${CONFORMANCE_BIN:-}" ]; then
	cp "$CONFORMANCE_BIN/connectconformance" "$CONFORMANCE_BIN/referenceserver" "$bin/"
else
	go build -modfile=tools/go.mod -o "$bin/" \
		connectrpc.com/conformance/cmd/connectconformance \
		connectrpc.com/conformance/cmd/referenceserver
fi
go build -race -o "$bin/conformance-gateway" ./testing/cmd/conformance-gateway
protos="$(go list -modfile=tools/go.mod -m -f '{{.Dir}}' connectrpc.com/conformance)/proto"

GORACE="halt_on_error=1" "$bin/connectconformance" --mode server \
	--conf testing/cmd/conformance-gateway/config.yaml -- \
	"$bin/conformance-gateway" -protos "$protos" -referenceserver "$bin/referenceserver"
