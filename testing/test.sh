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
#     the binaries tests build (portico, the protoc plugins: see
#     testing/gobuild) and the conformance suite's runner are built with
#     -race too;
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
apt_pid=""
cleanup() {
	for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
	# apt is let finish: a dpkg cut off midway leaves the machine's
	# package database for `dpkg --configure -a` to mend.
	if [ -n "$apt_pid" ]; then
		wait "$apt_pid" 2>/dev/null || true
	fi
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
if [ ${#pkgs[@]} -gt 0 ]; then
	phase "installing ${pkgs[*]} (in the background)"
	(
		# Another apt (an earlier run, unattended upgrades) may hold the
		# lock for a while: wait for it rather than fail.
		$sudo apt-get -o DPkg::Lock::Timeout=300 update -qq
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${pkgs[@]}"
	) >"$work/apt.log" 2>&1 &
	apt_pid=$!
fi

# fetch_buf puts Buf's release binary of the version tools/go.mod pins in
# $work and prints its path. The tarball comes from the npm registry, or
# from the user's cache of an earlier run, and is checked against
# tools/buf.sum each time before it is unpacked; fetch_buf fails when
# there is none for this platform, or no good tarball.
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
	dir="${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/portico-test"
	if ! mkdir -p -m 700 "$dir" 2>/dev/null; then
		dir="$work" # no cache: fetch every run
	fi
	local tgz="$dir/buf-$ver-$plat.tgz"
	if ! echo "$want  $tgz" | sha512sum -c --status 2>/dev/null; then
		curl -fsS --connect-timeout 10 --max-time 180 --retry 3 -o "$work/buf.tgz" \
			"https://registry.npmjs.org/@bufbuild/buf-$plat/-/buf-$plat-${ver#v}.tgz"
		if ! echo "$want  $work/buf.tgz" | sha512sum -c --status; then
			echo "the npm registry's buf $ver for $plat does not match tools/buf.sum" >&2
			return 1
		fi
		cp "$work/buf.tgz" "$tgz.$$" && mv "$tgz.$$" "$tgz" || true
		tgz="$work/buf.tgz"
	fi
	mkdir -p "$work/buf"
	tar -xzf "$tgz" -C "$work/buf" package/bin/buf
	echo "$work/buf/package/bin/buf"
}
buf_pid=""
if command -v curl >/dev/null 2>&1; then
	fetch_buf >"$work/buf.path" 2>"$work/buf.log" &
	buf_pid=$!
	bg+=("$buf_pid")
fi

# No DWARF in the test binaries: a third of each link. (Not when GOFLAGS
# sets -ldflags already: the last one would win.)
case " ${GOFLAGS:-} " in
*" -ldflags="*) export GOFLAGS="${GOFLAGS:-} -buildvcs=false" ;;
*) export GOFLAGS="${GOFLAGS:-} -buildvcs=false -ldflags=-w" ;;
esac
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
	apt_pid=""
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
