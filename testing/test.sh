#!/usr/bin/env bash
# Runs Portico's whole test suite on a fresh machine: static checks, then
# every test with the race detector. It installs or starts what the tests
# need itself; today that is nothing beyond Go and the module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."

export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

echo "== go vet"
go vet ./...

echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "== go test -race"
go test -race -timeout 20m ./...
