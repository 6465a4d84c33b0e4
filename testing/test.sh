#!/usr/bin/env bash
# Runs Portico's whole test suite on a fresh machine: static checks, then
# every test with the race detector. It installs or starts what the tests
# need itself: beyond Go and the module proxy, that is redis-server,
# PostgreSQL and curl, which it installs from Debian's packages when they
# are missing (with sudo when not root). The tests start their own
# redis-server and postgres processes (testing/redistest,
# testing/pgtest); set CI=1 to make them fail, not skip, without them.
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

# PostgreSQL for the control plane's store tests (testing/pgtest starts
# its own server; it finds initdb on PATH or in /usr/lib/postgresql).
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
	echo "== installing postgresql"
	sudo=""
	if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
		sudo=sudo
	fi
	$sudo apt-get update
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql
fi

# curl for the README's blocks, which cmd/portico's TestREADME runs.
if ! command -v curl >/dev/null 2>&1; then
	echo "== installing curl"
	sudo=""
	if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
		sudo=sudo
	fi
	$sudo apt-get update
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl ca-certificates
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
