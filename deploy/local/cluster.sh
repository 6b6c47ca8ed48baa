#!/usr/bin/env bash
# deploy/local/cluster.sh: run the whole dts cluster on this machine, without
# containers. The engine behind `make up`, `make down`, `make status` and
# `make logs`.
#
#   cluster.sh up            start PostgreSQL, Redis, submitter, coordinator,
#                            worker-1..3, Prometheus and Grafana (if installed)
#   cluster.sh down          stop all of it (workers get 35 s to drain)
#   cluster.sh status        one line per component: state, pid, URL, health
#   cluster.sh logs [NAME]   last 100 lines of one or all logs (-f on a terminal)
#   cluster.sh clean         down, then delete .run (data, logs, binaries)
#
# Everything lives in .run/ at the repository root (git-ignored):
#   .run/bin/                binaries (make build)
#   .run/pg/  .run/redis/    PostgreSQL data dir, Redis AOF; kept across down/up
#   .run/logs/NAME.log       one log per component
#   .run/pids/NAME.pid       one pid file per process started here
#   .run/cluster.env         the ports and URLs of the running cluster, so that
#                            status/down/logs find what up started
#
# Settings (environment):
#   PG_PORT=5432 REDIS_PORT=6379 SUBMITTER_PORT=8000 COORDINATOR_PORT=9000
#   WORKER_BASE_PORT=7001 (worker-N listens on WORKER_BASE_PORT+N-1)
#   WORKERS=3 PROMETHEUS_PORT=9090 GRAFANA_PORT=3000
#   PY_WORKERS=0: also start py-worker-1..N, the original system's job types
#   on the Python SDK (sdk/python/examples/original_worker.py, run by
#   DTS_PYTHON, default /usr/bin/python3, which needs python3-redis).
#   DATABASE_URL and REDIS_URL, both set: use those servers; start neither
#   PostgreSQL nor Redis here.
#   SKIP_BUILD=1: use the binaries already in .run/bin.
#   PROMETHEUS_CONFIG=deploy/prometheus/prometheus.yml: the scrape config to
#   adapt (Prometheus starts only if it exists and prometheus is installed).
#
# The services are started with exactly these variables (the contract with
# the binaries; each serves GET /healthz):
#   submitter    SUBMITTER_ADDR DATABASE_URL REDIS_URL
#   coordinator  COORDINATOR_ADDR COORDINATOR_ID DATABASE_URL REDIS_URL
#   worker-N     WORKER_ID WORKER_ADDR REDIS_URL  (never DATABASE_URL)
#   py-worker-N  WORKER_ID REDIS_URL PYTHONPATH  (no HTTP port: healthy once
#                the submitter's GET /workers/py-worker-N knows it)
# plus whatever else the caller's environment holds: so email jobs go out
# through an SMTP server with SMTP_HOST and SMTP_FROM (and SMTP_PORT,
# SMTP_TLS, SMTP_USERNAME, SMTP_PASSWORD) set for `make up`. Without
# SMTP_HOST the workers do not handle email, and email jobs wait (GET /stats
# unknown_names). A local sink that prints what it gets (Debian package
# python3-aiosmtpd):
#   python3 -m aiosmtpd -n -l 127.0.0.1:2525 &
#   SMTP_HOST=127.0.0.1 SMTP_PORT=2525 SMTP_TLS=none SMTP_FROM=dts@localhost make up
#
# Local PostgreSQL trusts every connection from 127.0.0.1 (user postgres, no
# password): it is for development only and listens on 127.0.0.1 only.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUN=$ROOT/.run
BIN=$RUN/bin
LOGS=$RUN/logs
PIDS=$RUN/pids
STATE=$RUN/cluster.env
PROMETHEUS_CONFIG=${PROMETHEUS_CONFIG:-$ROOT/deploy/prometheus/prometheus.yml}
PYTHON=${DTS_PYTHON:-/usr/bin/python3}
PY_WORKER_SCRIPT=$ROOT/sdk/python/examples/original_worker.py

# ---------------------------------------------------------------- output

if [[ -t 1 ]]; then
	bold=$'\e[1m' red=$'\e[31m' green=$'\e[32m' yellow=$'\e[33m' reset=$'\e[0m'
else
	bold='' red='' green='' yellow='' reset=''
fi
say() { printf '%s==>%s %s\n' "$bold" "$reset" "$*"; }
ok() { printf '    %s%s%s\n' "$green" "$*" "$reset"; }
warn() { printf '%swarning:%s %s\n' "$yellow" "$reset" "$*" >&2; }
die() {
	printf '%serror:%s %s\n' "$red" "$reset" "$*" >&2
	exit 1
}

# ---------------------------------------------------------------- config

CONFIG_VARS=(PG_PORT REDIS_PORT SUBMITTER_PORT COORDINATOR_PORT WORKER_BASE_PORT WORKERS PY_WORKERS
	PROMETHEUS_PORT GRAFANA_PORT DATABASE_URL REDIS_URL EXTERNAL_STORES)

# load_config: defaults < what `up` saved in .run/cluster.env < environment.
load_config() {
	local v
	declare -gA from_env=()
	for v in "${CONFIG_VARS[@]}"; do
		if [[ -n ${!v+x} ]]; then from_env[$v]=${!v}; fi
	done
	if [[ -f $STATE ]]; then
		# shellcheck disable=SC1090
		source "$STATE"
	fi
	for v in "${!from_env[@]}"; do printf -v "$v" '%s' "${from_env[$v]}"; done

	: "${PG_PORT:=5432}" "${REDIS_PORT:=6379}" "${SUBMITTER_PORT:=8000}" "${COORDINATOR_PORT:=9000}"
	: "${WORKER_BASE_PORT:=7001}" "${WORKERS:=3}" "${PY_WORKERS:=0}" "${PROMETHEUS_PORT:=9090}" "${GRAFANA_PORT:=3000}"
	for v in PG_PORT REDIS_PORT SUBMITTER_PORT COORDINATOR_PORT WORKER_BASE_PORT WORKERS PY_WORKERS PROMETHEUS_PORT GRAFANA_PORT; do
		[[ ${!v} =~ ^[0-9]+$ ]] || die "$v=${!v} is not a number"
	done

	# Both URLs given (and not merely the ones a previous `up` saved for
	# its own servers): use external servers.
	if [[ -n ${from_env[DATABASE_URL]:-} && -n ${from_env[REDIS_URL]:-} ]]; then
		EXTERNAL_STORES=1
	elif [[ -n ${from_env[DATABASE_URL]:-}${from_env[REDIS_URL]:-} && ${EXTERNAL_STORES:-0} != 1 ]]; then
		warn "only one of DATABASE_URL and REDIS_URL is set: ignoring it and running local PostgreSQL and Redis (set both to use your own servers)"
	fi
	: "${EXTERNAL_STORES:=0}"
	if [[ $EXTERNAL_STORES != 1 ]]; then
		DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/dts?sslmode=disable"
		REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
	fi

	SERVICES=(submitter coordinator)
	local i
	for ((i = 1; i <= WORKERS; i++)); do SERVICES+=("worker-$i"); done
	for ((i = 1; i <= PY_WORKERS; i++)); do SERVICES+=("py-worker-$i"); done

	# PostgreSQL runs as the OS user postgres when we are root; it must be
	# able to reach its data dir. If it cannot reach .run (a checkout under
	# /root, say), the data go to a fixed directory under /var/tmp instead.
	PG_BASE=$RUN
	if [[ $EUID -eq 0 ]] && id postgres &>/dev/null && ! reachable_by_postgres "$ROOT"; then
		PG_BASE=/var/tmp/dts-local-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)
	fi
	PGDATA_DIR=$PG_BASE/pg
	PG_SOCK=$PG_BASE/pgsock
}

save_config() {
	local v
	mkdir -p "$RUN"
	: >"$STATE"
	for v in "${CONFIG_VARS[@]}"; do printf '%s=%q\n' "$v" "${!v}" >>"$STATE"; done
}

# reachable_by_postgres DIR: can the postgres user enter DIR?
reachable_by_postgres() {
	local d=$1
	while [[ $d != / && -n $d ]]; do
		[[ $(stat -c %a "$d" 2>/dev/null) =~ [1357]$ ]] || [[ $(stat -c %U "$d") == postgres ]] || return 1
		d=$(dirname "$d")
	done
}

# mask URL: hide a password in a URL.
mask() { sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#' <<<"$1"; }

# ---------------------------------------------------------------- processes

# bin_of NAME: the binary a component runs.
bin_of() {
	case $1 in
	worker-*) echo worker ;;
	*) echo "$1" ;;
	esac
}

# port_of NAME
port_of() {
	case $1 in
	postgres) echo "$PG_PORT" ;;
	redis) echo "$REDIS_PORT" ;;
	submitter) echo "$SUBMITTER_PORT" ;;
	coordinator) echo "$COORDINATOR_PORT" ;;
	worker-*) echo $((WORKER_BASE_PORT + ${1#worker-} - 1)) ;;
	py-worker-*) ;; # none
	prometheus) echo "$PROMETHEUS_PORT" ;;
	grafana) echo "$GRAFANA_PORT" ;;
	esac
}

# port_var NAME: the variable that moves NAME to another port.
port_var() {
	case $1 in
	postgres) echo PG_PORT ;;
	redis) echo REDIS_PORT ;;
	submitter) echo SUBMITTER_PORT ;;
	coordinator) echo COORDINATOR_PORT ;;
	worker-*) echo WORKER_BASE_PORT ;;
	prometheus) echo PROMETHEUS_PORT ;;
	grafana) echo GRAFANA_PORT ;;
	esac
}

# pid_of NAME: print the pid of our running NAME; fail if it is not running.
# A pid only counts if that process's command line is what we started, so
# a stale pid file whose pid was reused by something else is ignored.
pid_of() {
	local name=$1 pidfile want pid
	case $name in
	postgres)
		pidfile=$PGDATA_DIR/postmaster.pid
		want=$PGDATA_DIR
		;;
	redis)
		pidfile=$PIDS/redis.pid
		want=redis-server
		;;
	prometheus | grafana)
		pidfile=$PIDS/$name.pid
		want=$name
		;;
	py-worker-*)
		pidfile=$PIDS/$name.pid
		want=$PY_WORKER_SCRIPT
		;;
	*)
		pidfile=$PIDS/$name.pid
		want=$BIN/$(bin_of "$name")
		;;
	esac
	[[ -r $pidfile ]] || return 1
	pid=$(head -n 1 "$pidfile" 2>/dev/null | tr -dc 0-9)
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$want" || return 1
	[[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 1
	echo "$pid"
}

# port_busy PORT: is something listening on 127.0.0.1:PORT (or all addresses)?
port_busy() {
	if command -v ss >/dev/null; then
		[[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}

# port_owner PORT: a description of who listens there, if ss can tell.
port_owner() {
	command -v ss >/dev/null || return 0
	ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:(([^)]*))' | head -n 1 | sed -E 's/users:\(\("([^"]+)",pid=([0-9]+).*/\1, pid \2/'
}

# wait_gone PID SECONDS: wait for PID to exit; fail if it is still there.
wait_gone() {
	local pid=$1 deadline=$((SECONDS + $2))
	while kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# ---------------------------------------------------------------- packages

# PG_TUNING: server settings for a job queue's write load. Durability stays
# at PostgreSQL's defaults (fsync on, synchronous_commit on); these only give
# it memory and fewer checkpoints, which keeps a large backlog draining at
# full speed, and let autovacuum visit each database every 5 s instead of
# every minute: the jobs table's dead rows slow every claim until a vacuum
# removes them (docs/benchmarks.md, docs/operations.md). Override with
# PG_TUNING=... make up.
PG_TUNING=${PG_TUNING:--c shared_buffers=512MB -c max_wal_size=4GB -c checkpoint_timeout=15min -c autovacuum_naptime=5s}

# find_pg_bin: the directory with initdb, pg_ctl and postgres.
find_pg_bin() {
	local d
	if command -v pg_config >/dev/null; then
		d=$(pg_config --bindir 2>/dev/null || true)
		if [[ -x $d/initdb && -x $d/pg_ctl ]]; then
			echo "$d"
			return
		fi
	fi
	for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k5 -V -r); do
		if [[ -x $d/initdb && -x $d/pg_ctl ]]; then
			echo "$d"
			return
		fi
	done
	if d=$(command -v initdb); then
		dirname "$d"
		return
	fi
	return 1
}

# ensure_packages: install what `make up` starts when it is missing
# (deploy/local/prereqs.sh holds the list and says what it installed).
ensure_packages() {
	local profile=up
	[[ $EXTERNAL_STORES != 1 ]] || profile=up-external
	bash "$ROOT/deploy/local/prereqs.sh" "$profile" || die "prerequisites missing (see above)"
	if [[ $EXTERNAL_STORES != 1 ]]; then
		PG_BIN=$(find_pg_bin) || die "PostgreSQL server binaries (initdb, pg_ctl) not found even after installing postgresql"
		if [[ $EUID -eq 0 ]] && ! id postgres &>/dev/null; then
			die "running as root, PostgreSQL must run as the OS user 'postgres', which does not exist"
		fi
	fi
}

# as_pg CMD...: run as the postgres user when root (PostgreSQL refuses root).
as_pg() {
	if [[ $EUID -ne 0 ]]; then
		(cd / && "$@")
	elif command -v runuser >/dev/null; then
		(cd / && runuser -u postgres -- "$@")
	else
		(cd / && su postgres -s /bin/sh -c "$(printf '%q ' "$@")")
	fi
}

# ---------------------------------------------------------------- up

optional_components() {
	OPTIONAL=()
	if command -v prometheus >/dev/null && [[ -f $PROMETHEUS_CONFIG ]]; then
		OPTIONAL+=(prometheus)
	fi
	if grafana_bin >/dev/null; then OPTIONAL+=(grafana); fi
}

grafana_bin() {
	command -v grafana-server || { [[ -x /usr/sbin/grafana-server ]] && echo /usr/sbin/grafana-server; }
}

# check_ports: every port we are about to listen on must be free, unless our
# own process already holds it.
check_ports() {
	local name port bad=0 owner suggest
	local names=("${SERVICES[@]}" "${OPTIONAL[@]}")
	[[ $EXTERNAL_STORES == 1 ]] || names=(postgres redis "${names[@]}")
	for name in "${names[@]}"; do
		pid_of "$name" >/dev/null && continue
		port=$(port_of "$name")
		[[ -n $port ]] || continue
		if port_busy "$port"; then
			owner=$(port_owner "$port")
			suggest=$((port + 1))
			[[ $name != worker-* ]] || suggest=$((WORKER_BASE_PORT + 100))
			printf '%serror:%s port %s (%s) is already in use%s; stop that process or choose another port, e.g. %s=%s make up\n' \
				"$red" "$reset" "$port" "$name" "${owner:+ by $owner}" "$(port_var "$name")" "$suggest" >&2
			bad=1
		fi
	done
	((bad == 0)) || exit 1
}

start_postgres() {
	local pid
	if pid=$(pid_of postgres); then
		ok "postgres already running (pid $pid)"
		return
	fi
	mkdir -p "$PG_BASE" "$LOGS"
	local pg_log=$LOGS/postgres.log
	if [[ $PG_BASE != "$RUN" ]]; then
		pg_log=$PG_BASE/postgres.log
		say "postgres data in $PG_BASE (the postgres user cannot reach $RUN)"
	fi
	if [[ $EUID -eq 0 ]]; then
		[[ $PG_BASE == "$RUN" ]] || chown postgres: "$PG_BASE"
		mkdir -p "$PGDATA_DIR" "$PG_SOCK"
		chown postgres: "$PGDATA_DIR" "$PG_SOCK"
		touch "$pg_log" && chown postgres: "$pg_log"
	else
		mkdir -p "$PGDATA_DIR" "$PG_SOCK"
	fi
	[[ $pg_log == "$LOGS/postgres.log" ]] || ln -sfn "$pg_log" "$LOGS/postgres.log"
	chmod 700 "$PGDATA_DIR"
	if [[ ! -s $PGDATA_DIR/PG_VERSION ]]; then
		say "initdb $PGDATA_DIR"
		as_pg "$PG_BIN/initdb" -D "$PGDATA_DIR" -U postgres -A trust -E UTF8 --locale=C >"$RUN/initdb.log" 2>&1 ||
			die "initdb failed:"$'\n'"$(cat "$RUN/initdb.log")"
	fi
	say "starting postgres on 127.0.0.1:$PG_PORT"
	if ! as_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -l "$pg_log" -w -t 60 \
		-o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$PG_SOCK -c max_connections=200 $PG_TUNING" \
		start >/dev/null; then
		tail -n 20 "$pg_log" >&2 || true
		die "postgres did not start (log: $pg_log)"
	fi
	local psql=("$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -X -q -v ON_ERROR_STOP=1)
	if [[ $("${psql[@]}" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'dts'") != 1 ]]; then
		"${psql[@]}" -d postgres -c "CREATE DATABASE dts" || die "could not create database dts"
		ok "created database dts"
	fi
}

start_redis() {
	local pid
	if pid=$(pid_of redis); then
		ok "redis already running (pid $pid)"
		return
	fi
	mkdir -p "$RUN/redis" "$LOGS" "$PIDS"
	say "starting redis on 127.0.0.1:$REDIS_PORT"
	(cd "$RUN/redis" && setsid redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$RUN/redis" \
		--appendonly yes --daemonize yes --pidfile "$PIDS/redis.pid" --logfile "$LOGS/redis.log" </dev/null >/dev/null) ||
		die "redis-server failed to start (log: $LOGS/redis.log)"
	local deadline=$((SECONDS + 30))
	until [[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; do
		if ((SECONDS >= deadline)); then
			tail -n 20 "$LOGS/redis.log" >&2 || true
			die "redis did not answer PING within 30 s (log: $LOGS/redis.log)"
		fi
		sleep 0.2
	done
}

# launch NAME CMD...: start CMD detached (own session, no terminal), output to
# .run/logs/NAME.log, pid to .run/pids/NAME.pid.
launch() {
	local name=$1 pid
	shift
	if pid=$(pid_of "$name"); then
		ok "$name already running (pid $pid; make down && make up to restart it)"
		return
	fi
	mkdir -p "$LOGS" "$PIDS"
	rm -f "$PIDS/$name.pid"
	printf '\n=== %s: starting %s\n' "$(date '+%F %T')" "$name" >>"$LOGS/$name.log"
	# The child writes its own pid, then becomes the program (exec keeps
	# the pid), so the pid file names the service, not a wrapper.
	# shellcheck disable=SC2016 # $$ and $@ belong to the inner shell
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PIDS/$name.pid" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
	local deadline=$((SECONDS + 5))
	until [[ -s $PIDS/$name.pid ]]; do
		((SECONDS < deadline)) || die "$name did not start"
		sleep 0.05
	done
	ok "$name started (pid $(cat "$PIDS/$name.pid"))"
}

start_services() {
	local name n
	say "starting services"
	launch submitter env SUBMITTER_ADDR="127.0.0.1:$SUBMITTER_PORT" \
		DATABASE_URL="$DATABASE_URL" REDIS_URL="$REDIS_URL" "$BIN/submitter"
	launch coordinator env COORDINATOR_ADDR="127.0.0.1:$COORDINATOR_PORT" COORDINATOR_ID=coordinator-1 \
		DATABASE_URL="$DATABASE_URL" REDIS_URL="$REDIS_URL" "$BIN/coordinator"
	for ((n = 1; n <= WORKERS; n++)); do
		name=worker-$n
		launch "$name" env -u DATABASE_URL WORKER_ID="$name" WORKER_ADDR="127.0.0.1:$(port_of "$name")" \
			REDIS_URL="$REDIS_URL" "$BIN/worker"
	done
	for ((n = 1; n <= PY_WORKERS; n++)); do
		launch "py-worker-$n" env -u DATABASE_URL WORKER_ID="py-worker-$n" REDIS_URL="$REDIS_URL" \
			PYTHONPATH="$ROOT/sdk/python/src" PYTHONUNBUFFERED=1 "$PYTHON" "$PY_WORKER_SCRIPT"
	done
}

# check_python: the Python workers' interpreter can import redis-py.
check_python() {
	((PY_WORKERS > 0)) || return 0
	[[ -x $PYTHON ]] || die "PY_WORKERS=$PY_WORKERS: $PYTHON not found (set DTS_PYTHON)"
	"$PYTHON" -c 'import redis' 2>/dev/null ||
		die "PY_WORKERS=$PY_WORKERS: $PYTHON cannot import redis (apt-get install python3-redis)"
}

# Prometheus scrapes the same targets as in deploy/prometheus/prometheus.yml,
# with the container names (submitter:8000, coordinator:9000, worker-N:700N,
# prometheus:9090) rewritten to this machine's ports, and rule files found in
# deploy/prometheus.
start_prometheus() {
	local pid src cfg=$RUN/prometheus.yml n
	src=$(cd "$(dirname "$PROMETHEUS_CONFIG")" && pwd)
	if pid=$(pid_of prometheus); then
		ok "prometheus already running (pid $pid)"
		return
	fi
	local subst=(-e "s#\\bsubmitter:[0-9]+#127.0.0.1:$SUBMITTER_PORT#g"
		-e "s#\\bcoordinator:[0-9]+#127.0.0.1:$COORDINATOR_PORT#g"
		-e "s#\\bprometheus:[0-9]+#127.0.0.1:$PROMETHEUS_PORT#g"
		-e "s#/etc/prometheus/#$src/#g")
	for ((n = 1; n <= WORKERS; n++)); do
		subst+=(-e "s#\\bworker-$n:[0-9]+#127.0.0.1:$(port_of "worker-$n")#g")
	done
	# Relative rule_files entries are relative to the config file: make
	# them point into deploy/prometheus.
	sed -E "${subst[@]}" "$PROMETHEUS_CONFIG" | awk -v dir="$src/" '
		/^[^ \t#-]/ { in_rules = ($1 == "rule_files:") }
		in_rules && match($0, /^[ \t]*-[ \t]*["'\'']?/) {
			rest = substr($0, RLENGTH + 1)
			if (rest !~ /^\//) { $0 = substr($0, 1, RLENGTH) dir rest }
		}
		{ print }' >"$cfg"
	mkdir -p "$RUN/prometheus"
	say "starting prometheus on 127.0.0.1:$PROMETHEUS_PORT (config $cfg)"
	launch prometheus prometheus --config.file="$cfg" --storage.tsdb.path="$RUN/prometheus" \
		--web.listen-address="127.0.0.1:$PROMETHEUS_PORT"
}

# Grafana gets deploy/grafana/provisioning with the Prometheus address and the
# dashboards path rewritten for this machine; data and logs go to .run/grafana.
start_grafana() {
	local pid bin src=$ROOT/deploy/grafana dst=$RUN/grafana
	if pid=$(pid_of grafana); then
		ok "grafana already running (pid $pid)"
		return
	fi
	bin=$(grafana_bin)
	mkdir -p "$dst/data" "$dst/logs" "$dst/plugins"
	rm -rf "$dst/provisioning"
	if [[ -d $src/provisioning ]]; then
		cp -r "$src/provisioning" "$dst/provisioning"
		find "$dst/provisioning" -type f \( -name '*.yml' -o -name '*.yaml' \) -exec sed -E -i \
			-e "s#\\bprometheus:[0-9]+#127.0.0.1:$PROMETHEUS_PORT#g" \
			-e "s#(/etc/grafana|/var/lib/grafana)/dashboards#$src/dashboards#g" {} +
	else
		mkdir -p "$dst/provisioning"
	fi
	local home=/usr/share/grafana
	say "starting grafana on 127.0.0.1:$GRAFANA_PORT"
	launch grafana env GF_PATHS_PROVISIONING="$dst/provisioning" GF_PATHS_DATA="$dst/data" \
		GF_PATHS_LOGS="$dst/logs" GF_PATHS_PLUGINS="$dst/plugins" \
		GF_SERVER_HTTP_ADDR=127.0.0.1 GF_SERVER_HTTP_PORT="$GRAFANA_PORT" \
		GF_AUTH_ANONYMOUS_ENABLED=true GF_AUTH_ANONYMOUS_ORG_ROLE=Admin \
		"$bin" --homepath "$home"
}

# health_url NAME: what answers 200 when NAME is healthy.
health_url() {
	local port
	port=$(port_of "$1")
	case $1 in
	prometheus) echo "http://127.0.0.1:$port/-/healthy" ;;
	py-worker-*) echo "http://127.0.0.1:$SUBMITTER_PORT/workers/$1" ;; # registered by its heartbeats
	grafana) echo "http://127.0.0.1:$port/api/health" ;;
	*) echo "http://127.0.0.1:$port/healthz" ;;
	esac
}

http_ok() { [[ $(curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null) == 200 ]]; }

# wait_healthy NAME...: up to 60 s for each to answer 200; on failure show
# its log.
wait_healthy() {
	local deadline=$((SECONDS + 60)) name pending=("$@") still
	say "waiting for /healthz (up to 60 s)"
	while ((${#pending[@]})); do
		still=()
		for name in "${pending[@]}"; do
			if http_ok "$(health_url "$name")"; then
				ok "$name healthy"
			elif ! pid_of "$name" >/dev/null; then
				fail_health "$name" "exited"
			else
				still+=("$name")
			fi
		done
		pending=("${still[@]}")
		if ((${#pending[@]})); then
			((SECONDS < deadline)) || fail_health "${pending[0]}" "not healthy after 60 s"
			sleep 0.5
		fi
	done
}

fail_health() {
	printf '%serror:%s %s %s; last lines of %s:\n' "$red" "$reset" "$1" "$2" "$LOGS/$1.log" >&2
	tail -n 30 "$LOGS/$1.log" >&2 || true
	printf '\nEverything else is left running: make status, make logs NAME=%s, make down.\n' "$1" >&2
	exit 1
}

cmd_up() {
	local name
	ensure_packages
	check_python
	optional_components
	check_ports
	save_config
	mkdir -p "$LOGS" "$PIDS"

	if [[ $EXTERNAL_STORES == 1 ]]; then
		say "using DATABASE_URL=$(mask "$DATABASE_URL") and REDIS_URL=$(mask "$REDIS_URL")"
	else
		start_postgres
		start_redis
	fi

	if [[ ${SKIP_BUILD:-0} == 1 ]]; then
		say "SKIP_BUILD=1: using the binaries in $BIN"
	else
		say "building binaries (make build)"
		make -s -C "$ROOT" build || die "build failed"
	fi
	for name in submitter coordinator worker; do
		[[ -x $BIN/$name ]] || die "$BIN/$name is missing (make build)"
	done
	start_services

	for name in "${OPTIONAL[@]}"; do "start_$name"; done
	if [[ ! -f $PROMETHEUS_CONFIG ]]; then
		warn "$PROMETHEUS_CONFIG not found: prometheus not started"
	fi
	if ! grafana_bin >/dev/null; then
		printf '    grafana is not installed: add Grafana'\''s apt repository (https://apt.grafana.com, package grafana)\n'
		printf '    or run the full stack in containers with docker compose (deploy/); carrying on without it.\n'
	fi

	wait_healthy "${SERVICES[@]}" "${OPTIONAL[@]}"

	echo
	say "dts is up"
	[[ $EXTERNAL_STORES == 1 ]] || printf '    %-12s %s\n' postgres "$(mask "$DATABASE_URL")" redis "$REDIS_URL"
	for name in "${SERVICES[@]}" "${OPTIONAL[@]}"; do
		if [[ $name == py-worker-* ]]; then
			printf '    %-12s python, no HTTP port (make logs NAME=%s)\n' "$name" "$name"
			continue
		fi
		printf '    %-12s http://127.0.0.1:%s\n' "$name" "$(port_of "$name")"
	done
	printf '    %-12s http://127.0.0.1:%s/ui/   (the operations console; docs/ui.md)\n' console "$SUBMITTER_PORT"
	cat <<EOF

    try:   curl -X POST 127.0.0.1:$SUBMITTER_PORT/submit_job -d '{"name":"cpu_intensive","payload":"x"}'
    then:  make status | make logs NAME=worker-1 | make down
EOF
	if [[ -n ${SMTP_HOST:-} ]]; then
		printf '    email: jobs named email go out through %s (port %s, SMTP_TLS=%s)\n' \
			"$SMTP_HOST" "${SMTP_PORT:-by SMTP_TLS}" "${SMTP_TLS:-starttls}"
	else
		printf '    email: SMTP_HOST is not set, so email jobs wait for a worker that has it. To send them:\n'
		printf '           make down; SMTP_HOST=smtp.example.com SMTP_FROM=noreply@example.com make up\n'
		printf '           (a local sink that prints each message: python3 -m aiosmtpd -n -l 127.0.0.1:2525,\n'
		printf '           package python3-aiosmtpd; then SMTP_HOST=127.0.0.1 SMTP_PORT=2525 SMTP_TLS=none)\n'
	fi
}

# ---------------------------------------------------------------- down

# stop_group SECONDS NAME...: SIGTERM each running NAME, wait up to SECONDS
# for all of them, then SIGKILL the rest.
stop_group() {
	local grace=$1 name pid deadline
	shift
	local -A pids=()
	for name in "$@"; do
		if pid=$(pid_of "$name"); then
			kill -TERM "$pid" 2>/dev/null || true
			pids[$name]=$pid
			ok "$name: SIGTERM (pid $pid)"
		fi
	done
	deadline=$((SECONDS + grace))
	for name in "${!pids[@]}"; do
		pid=${pids[$name]}
		if ! wait_gone "$pid" $((deadline > SECONDS ? deadline - SECONDS : 0)); then
			warn "$name (pid $pid) still running after ${grace}s: SIGKILL"
			kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
			wait_gone "$pid" 5 || true
		fi
	done
	for name in "$@"; do rm -f "$PIDS/$name.pid"; done
}

cmd_down() {
	local pid
	say "stopping dts"
	# Producers first, then workers (they finish or hand back what they
	# run while the coordinator still records results), then the rest.
	stop_group 35 submitter
	stop_group 35 "${SERVICES[@]:2}" # the workers
	stop_group 35 coordinator
	stop_group 15 prometheus grafana

	if pid=$(pid_of redis); then
		ok "redis: SHUTDOWN (pid $pid)"
		redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
		if ! wait_gone "$pid" 30; then
			warn "redis still running: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		rm -f "$PIDS/redis.pid"
	fi
	if pid=$(pid_of postgres); then
		ok "postgres: pg_ctl stop (pid $pid)"
		local pg_bin
		pg_bin=$(find_pg_bin) || pg_bin=$(dirname "$(readlink -f "/proc/$pid/exe")")
		if ! as_pg "$pg_bin/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 60 stop >/dev/null; then
			warn "pg_ctl stop failed: SIGQUIT"
			kill -QUIT "$pid" 2>/dev/null || true
			wait_gone "$pid" 10 || true
		fi
	fi
	rm -f "$STATE"
	ok "stopped (data kept in .run; make clean deletes it)"
}

cmd_clean() {
	cmd_down
	local what=$RUN
	[[ $PG_BASE == "$RUN" ]] || what+=" and $PG_BASE"
	say "deleting $what"
	rm -rf "$RUN"
	[[ $PG_BASE == "$RUN" ]] || rm -rf "$PG_BASE"
}

# ---------------------------------------------------------------- status

cmd_status() {
	local name pid state health url port
	optional_components
	local names=(postgres redis "${SERVICES[@]}" prometheus grafana)
	printf '%-12s %-9s %-8s %-56s %s\n' NAME STATE PID URL HEALTH
	for name in "${names[@]}"; do
		port=$(port_of "$name")
		state=stopped
		if pid=$(pid_of "$name"); then state=running; else pid=-; fi
		health=-
		case $name in
		postgres)
			url=$(mask "$DATABASE_URL")
			if [[ $EXTERNAL_STORES == 1 ]]; then
				state=external pid=-
				command -v pg_isready >/dev/null && { pg_isready -q -d "$DATABASE_URL" && health=ok || health=down; }
			elif [[ $state == running ]]; then
				pg_isready -q -h 127.0.0.1 -p "$port" -U postgres -d postgres 2>/dev/null && health=ok || health=down
			fi
			;;
		redis)
			url=$(mask "$REDIS_URL")
			if [[ $EXTERNAL_STORES == 1 ]]; then
				state=external pid=-
				[[ $(redis-cli -u "$REDIS_URL" ping 2>/dev/null) == PONG ]] && health=ok || health=down
			elif [[ $state == running ]]; then
				[[ $(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) == PONG ]] && health=ok || health=down
			fi
			;;
		prometheus | grafana)
			[[ $state == running || " ${OPTIONAL[*]} " == *" $name "* ]] || continue
			url=http://127.0.0.1:$port
			[[ $state == running ]] && { http_ok "$(health_url "$name")" && health=ok || health=down; }
			;;
		*)
			url=http://127.0.0.1:$port
			[[ $name != py-worker-* ]] || url="python; $(health_url "$name")"
			if [[ $state == running ]]; then
				local code
				code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$(health_url "$name")" 2>/dev/null || true)
				[[ $code == 200 ]] && health=ok || health="down (${code:-no answer})"
			fi
			;;
		esac
		printf '%-12s %-9s %-8s %-56s %s\n' "$name" "$state" "$pid" "$url" "$health"
	done
}

# ---------------------------------------------------------------- logs

cmd_logs() {
	local files=() name=${1:-} f
	if [[ -n $name ]]; then
		f=$LOGS/$name.log
		if [[ ! -e $f ]]; then
			printf 'no log for %s; there are: %s\n' "$name" "$(find "$LOGS" -maxdepth 1 -name '*.log' -printf '%f ' 2>/dev/null | sed 's/\.log//g')" >&2
			exit 1
		fi
		files=("$f")
	else
		for f in "$LOGS"/*.log; do [[ -e $f ]] && files+=("$f"); done
		((${#files[@]})) || die "no logs in $LOGS yet (make up)"
	fi
	if [[ -t 1 ]]; then
		exec tail -n 100 -F "${files[@]}"
	else
		exec tail -n 100 "${files[@]}"
	fi
}

# ---------------------------------------------------------------- main

usage() {
	awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
	exit "${1:-0}"
}

main() {
	local cmd=${1:-}
	[[ -n $cmd ]] || usage 2
	shift
	load_config
	case $cmd in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	logs) cmd_logs "$@" ;;
	clean) cmd_clean ;;
	-h | --help | help) usage 0 ;;
	*)
		echo "unknown command: $cmd" >&2
		usage 2
		;;
	esac
}

main "$@"
