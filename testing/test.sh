#!/usr/bin/env bash
# Runs Portico's whole test suite on a fresh machine: static checks, then
# every test with the race detector. It installs or starts what the tests
# need itself: beyond Go and the module proxy, that is redis-server, which
# it installs from Debian's packages when it is missing (with sudo when not
# root). The tests start their own redis-server processes
# (testing/redistest); set CI=1 to make them fail, not skip, without it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
	echo "== installing redis-server"
	sudo=""
	if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
		sudo=sudo
	fi
	$sudo apt-get update
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server
fi

export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './gen/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "== go test -race"
go test -race -timeout 20m ./...

echo "== Connect conformance suite through the gateway"
./testing/conformance.sh
