#!/usr/bin/env bash
# deploy/local/prereqs.sh: the one list of what dts needs on this machine,
# and its installer. `make up` (through cluster.sh), `make test` and
# .ci/run all call it, so a prerequisite is added here and nowhere else.
#
#   prereqs.sh [--dry-run] up        what `make up` starts: PostgreSQL,
#                                    Redis, Prometheus, curl (and
#                                    python3-redis when PY_WORKERS > 0)
#   prereqs.sh [--dry-run] up-external  the same with DATABASE_URL and
#                                    REDIS_URL given (no PostgreSQL, Redis)
#   prereqs.sh [--dry-run] test      what `make test` starts or calls:
#                                    PostgreSQL, Redis, redis-sentinel (the
#                                    Redis failover test), Prometheus and
#                                    promtool, pgbouncer (the leader test
#                                    through a pooler), gcc (go test -race
#                                    needs cgo), curl, procps, chromium
#                                    (the console's browser tests), iproute2
#                                    (the PostgreSQL partition test and the
#                                    hosts of the chaos test), iptables (the
#                                    chaos test's partitions), python3-redis
#                                    and nodejs/npm (the Python and
#                                    TypeScript SDKs and their conformance runs)
#   prereqs.sh [--dry-run] ci        test, plus make
#
# test and ci also build Jaeger (the trace test, e2e/trace_test.go), which
# has no Debian package, from the Go module proxy with the Go toolchain,
# once, into a cache outside the repo: $DTS_JAEGER, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/dts/jaeger-<version>/jaeger, where the
# test looks for it. A cached binary is kept; the first build takes
# minutes.
#
# It installs the missing Debian packages with apt-get (apt-get update
# first) and prints what it installed. Not root: it installs nothing and
# stops with the exact command to run. --dry-run prints what is missing and
# the command it would run, and changes nothing.
#
# It uses bash builtins only (command -v, compgen), so that it runs with any
# PATH; DTS_PG_LIB (default /usr/lib/postgresql) is where Debian puts
# PostgreSQL's server binaries, which are not on PATH, and DTS_SBIN
# (default /usr/sbin) where it puts pgbouncer, ip and iptables, which are
# not on a non-root PATH; DTS_PYTHON (default /usr/bin/python3) is the
# Python that Debian's python3-* packages serve (not a python3 first on PATH).
set -euo pipefail

dry=0
if [[ ${1:-} == --dry-run ]]; then
	dry=1
	shift
fi
profile=${1:-}
pg_lib=${DTS_PG_LIB:-/usr/lib/postgresql}
sbin=${DTS_SBIN:-/usr/sbin}
python=${DTS_PYTHON:-/usr/bin/python3} # Debian's, which python3-* packages serve

have() { command -v "$1" >/dev/null 2>&1; }

# have_pg: PostgreSQL's server binaries (initdb, pg_ctl) are somewhere we look.
have_pg() {
	local d
	if have pg_config; then
		d=$(pg_config --bindir 2>/dev/null || true)
		[[ -n $d && -x $d/initdb && -x $d/pg_ctl ]] && return 0
	fi
	for d in "$pg_lib"/*/bin; do
		[[ -x $d/initdb && -x $d/pg_ctl ]] && return 0
	done
	have initdb && have pg_ctl
}

# have_pgbouncer: on PATH, or in Debian's place (pgtest looks there too).
have_pgbouncer() { have pgbouncer || [[ -x $sbin/pgbouncer ]]; }

missing=()
need() { # need PACKAGE CHECK...: PACKAGE is missing unless every CHECK passes
	local pkg=$1
	shift
	local check
	for check in "$@"; do
		if ! eval "$check"; then
			missing+=("$pkg")
			return
		fi
	done
}

case $profile in
up | up-external | test | ci) ;;
*)
	echo "usage: $0 [--dry-run] up|up-external|test|ci" >&2
	exit 2
	;;
esac

if [[ $profile != up-external ]]; then
	need postgresql have_pg
	need redis-server 'have redis-server'
fi
need prometheus 'have prometheus'
need curl 'have curl'
# make up's Python workers (PY_WORKERS=N) run on Debian's python3 with redis-py.
if [[ $profile == up* ]] && ((${PY_WORKERS:-0} > 0)); then
	need python3-redis '"$python" -c "import redis" 2>/dev/null'
fi
if [[ $profile == test || $profile == ci ]]; then
	need prometheus 'have promtool' # Debian's prometheus package ships promtool
	need redis-sentinel 'have redis-sentinel'
	need pgbouncer have_pgbouncer
	need gcc 'have gcc'
	need procps 'have pgrep'
	need chromium 'have chromium'
	need iproute2 'have ip || [[ -x $sbin/ip ]]'
	need iptables 'have iptables || [[ -x $sbin/iptables ]]'
	# The SDKs' tests and conformance runs: the Python SDK runs on Debian's
	# python3 with python3-redis; the TypeScript SDK builds with npm.
	need python3-redis '"$python" -c "import redis" 2>/dev/null'
	need nodejs 'have node'
	need npm 'have npm'
fi
[[ $profile != ci ]] || need make 'have make'

# jaeger_step builds the cached Jaeger for the test and ci profiles when
# it is missing (a dry run says it would).
jaeger_version=v1.76.0
jaeger_bin=${DTS_JAEGER:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/dts/jaeger-$jaeger_version/jaeger}
jaeger_step() {
	[[ $profile == test || $profile == ci ]] || return 0
	[[ -x $jaeger_bin ]] && return 0
	if ((dry)); then
		echo "would build Jaeger $jaeger_version into $jaeger_bin (go build from the Go module proxy)"
		return 0
	fi
	local go tmp
	go=$(command -v go || true)
	[[ -n $go ]] || go=/usr/local/go/bin/go
	if [[ ! -x $go ]]; then
		echo "error: building Jaeger $jaeger_version (the trace test) needs the Go toolchain, found neither go on PATH nor $go" >&2
		exit 1
	fi
	echo "prerequisites ($profile): building Jaeger $jaeger_version into $jaeger_bin (once; this takes minutes)"
	tmp=$(mktemp -d)
	# A module of its own that requires Jaeger, with Jaeger's own replace
	# (go install refuses a module that has one).
	printf 'module dts.local/jaegerbuild\n\ngo 1.24\n\nreplace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0\n' >"$tmp/go.mod"
	mkdir -p "$(dirname "$jaeger_bin")"
	if ! (cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod "$go" get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$jaeger_version" &&
		GOWORK=off "$go" build -o "$jaeger_bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger); then
		rm -rf "$tmp" "$jaeger_bin.tmp"
		echo "error: building Jaeger $jaeger_version failed" >&2
		exit 1
	fi
	mv "$jaeger_bin.tmp" "$jaeger_bin"
	rm -rf "$tmp"
	echo "prerequisites ($profile): built Jaeger $jaeger_version"
}

# A package named twice (prometheus for both binaries) is installed once.
declare -A seen=()
pkgs=()
for p in "${missing[@]}"; do
	[[ -n ${seen[$p]:-} ]] || pkgs+=("$p")
	seen[$p]=1
done

if ((${#pkgs[@]} == 0)); then
	echo "prerequisites ($profile): all present"
	jaeger_step
	exit 0
fi

install_cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${pkgs[*]}"
echo "prerequisites ($profile): missing ${pkgs[*]}"
if ((dry)); then
	echo "would run: $install_cmd"
	jaeger_step
	exit 0
fi
if ! have apt-get; then
	echo "error: this is not a Debian/Ubuntu system (no apt-get): install ${pkgs[*]} yourself" >&2
	exit 1
fi
if [[ $EUID -ne 0 ]]; then
	echo "error: installing needs root; run this, then try again:" >&2
	echo "  sudo sh -c '$install_cmd'" >&2
	exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}"
echo "prerequisites ($profile): installed ${pkgs[*]}"
if [[ " ${pkgs[*]} " == *" postgresql "* || " ${pkgs[*]} " == *" redis-server "* || " ${pkgs[*]} " == *" prometheus "* ]]; then
	echo "note: Debian's packages may have started their own postgresql, redis-server or prometheus service on" \
		"its default port; dts starts its own servers, so stop those or choose other ports (PG_PORT, REDIS_PORT, PROMETHEUS_PORT)"
fi
jaeger_step
