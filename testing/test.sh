#!/usr/bin/env bash
# Runs Portico's whole test suite on a fresh machine: gofmt, go vet,
# staticcheck, every test with the race detector, and the Connect
# conformance suite through the gateway. It installs or starts what the
# tests need itself: beyond Go and the module proxy, that is redis-server,
# PostgreSQL and curl, which it installs from Debian's packages when they
# are missing (with sudo when not root), and buf's release binary from the
# npm registry. The tests start their own redis-server and postgres
# processes (testing/redistest, testing/pgtest); set CI=1 to make them
# fail, not skip, without them.
#
# A fresh 2-core machine is bound by the CPU, so the suite does every
# piece of work once (docs/operations.md, "The test suite"):
#   - every package is compiled once, with the race detector: go vet and
#     go test build with -race, staticcheck reads what they compiled, and
#     the binaries tests build (portico, the protoc plugins, the
#     conformance suite's runner) are built with -race too
#     (testing/gobuild);
#   - buf is Buf's release binary of the version tools/go.mod pins,
#     checked against tools/buf.sum, not a 2-minute build from source;
#   - apt, and staticcheck's build, which shares nothing with the
#     module, go on beside go vet.
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
phase() { printf '== %s (at %d s)\n' "$*" $((SECONDS - start)); }

work=$(mktemp -d)
bg=()
cleanup() {
	for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

# wait_job PID NAME LOG waits for a background job and fails with its log.
wait_job() {
	if ! wait "$1"; then
		cat "$3" >&2
		echo "$2 failed" >&2
		exit 1
	fi
}

sudo=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
	sudo=sudo
fi

# Debian's packages the tests need, installed in the background: apt
# waits on the network and dpkg more than on the CPU.
pkgs=()
command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
# testing/pgtest finds initdb on PATH or in /usr/lib/postgresql.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
	pkgs+=(postgresql)
fi
# curl for the README's blocks, which cmd/portico's TestREADME runs, and
# for fetching buf.
command -v curl >/dev/null 2>&1 || pkgs+=(curl ca-certificates)
apt_pid=""
if [ ${#pkgs[@]} -gt 0 ]; then
	phase "installing ${pkgs[*]} (in the background)"
	(
		$sudo apt-get update -qq
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
	) >"$work/apt.log" 2>&1 &
	apt_pid=$!
	bg+=("$apt_pid")
fi

# fetch_buf prints the path of Buf's release binary of the version
# tools/go.mod pins, fetched from the npm registry into the user's cache
# and checked against tools/buf.sum; it fails when there is none for this
# platform or the fetch fails.
fetch_buf() {
	local ver plat want dir
	ver=$(awk '$1 == "github.com/bufbuild/buf" {print $2}' tools/go.mod)
	case "$(uname -s)-$(uname -m)" in
	Linux-x86_64) plat=linux-x64 ;;
	*) echo "no release binary listed for $(uname -s)-$(uname -m)" >&2; return 1 ;;
	esac
	want=$(awk -v v="$ver" -v p="$plat" '$1 == v && $2 == p {print $3}' tools/buf.sum)
	if [ -z "$want" ]; then
		echo "tools/buf.sum has no $plat line for buf $ver" >&2
		return 1
	fi
	dir="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/portico-test/buf-$ver-$plat"
	mkdir -p "$dir"
	if ! echo "$want  $dir/buf.tgz" | sha512sum -c --status 2>/dev/null; then
		curl -fsS --retry 3 -o "$dir/buf.tgz.part" \
			"https://registry.npmjs.org/@bufbuild/buf-$plat/-/buf-$plat-${ver#v}.tgz"
		if ! echo "$want  $dir/buf.tgz.part" | sha512sum -c --status; then
			echo "the npm registry's buf $ver for $plat does not match tools/buf.sum" >&2
			return 1
		fi
		mv "$dir/buf.tgz.part" "$dir/buf.tgz"
	fi
	tar -xzf "$dir/buf.tgz" -C "$dir" package/bin/buf
	mv -f "$dir/package/bin/buf" "$dir/buf"
	echo "$dir/buf"
}
buf_pid=""
if command -v curl >/dev/null 2>&1; then
	fetch_buf >"$work/buf.path" 2>"$work/buf.log" &
	buf_pid=$!
	bg+=("$buf_pid")
fi

export GOFLAGS="${GOFLAGS:-} -buildvcs=false -ldflags=-w"
# A race-built binary sleeps a second at exit by default; the suite runs
# a few hundred of them.
export GORACE="${GORACE:-} atexit_sleep_ms=0"

phase "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './gen/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"
	echo "$unformatted"
	exit 1
fi

# staticcheck shares no compiled package with the module (it is not built
# with the race detector): it builds beside go vet.
mkdir -p "$work/bin"
GOBIN="$work/bin" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2 >"$work/staticcheck-build.log" 2>&1 &
staticcheck_pid=$!
bg+=("$staticcheck_pid")

phase "go vet -race"
go vet -race ./...

if [ -n "$apt_pid" ]; then
	phase "waiting for apt"
	wait_job "$apt_pid" "installing ${pkgs[*]}" "$work/apt.log"
fi
if [ -z "$buf_pid" ]; then
	fetch_buf >"$work/buf.path" 2>"$work/buf.log" &
	buf_pid=$!
fi
if wait "$buf_pid"; then
	export PORTICO_TEST_BUF
	PORTICO_TEST_BUF=$(cat "$work/buf.path")
else
	echo "buf's release binary could not be used ($(cat "$work/buf.log")): the tests build buf from tools/go.mod"
fi

# The packages whose tests run longest start first, so that the end of
# the run is not one long package alone on one core.
first=(./cmd/portico ./testing/fleet ./gateway/ratelimit/redissync ./testing/load ./gateway
	./control/distribution ./control/admin ./control/store ./testing/pgtest ./keysvc)
phase "go test -race"
go test -race -vet=off -timeout 20m "${first[@]}" ./...

phase "staticcheck and the Connect conformance suite through the gateway"
wait_job "$staticcheck_pid" "building staticcheck" "$work/staticcheck-build.log"
# staticcheck loads the packages as go test -race compiled them.
GOFLAGS="$GOFLAGS -race" "$work/bin/staticcheck" ./... >"$work/staticcheck.log" 2>&1 &
staticcheck_pid=$!
bg+=("$staticcheck_pid")
./testing/conformance.sh
wait_job "$staticcheck_pid" "staticcheck" "$work/staticcheck.log"
cat "$work/staticcheck.log"
phase "passed"
