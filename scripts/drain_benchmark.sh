#!/usr/bin/env bash
# drain_benchmark.sh: how fast a running cluster (make up) drains COUNT
# (default 50000) noop jobs posted in batches of BATCH_SIZE (default 1000),
# CONCURRENCY (default 4) batches in flight: the time from the first post
# until GET /stats counts COUNT more jobs completed, and the jobs per second.
# Gives up after WAIT (default 300) seconds. SUBMITTER_URL as in lib.sh
# (loopback only unless ALLOW_REMOTE=1); TOKEN, when set, is sent as a
# bearer token. Exit status: 0 when every job completed in time.
set -euo pipefail
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"

COUNT=${COUNT:-50000}
CONCURRENCY=${CONCURRENCY:-4}
WAIT=${WAIT:-300}
BATCH_SIZE=${BATCH_SIZE:-1000}
dts_init drain_benchmark
dts_uint BATCH_SIZE
((BATCH_SIZE >= 1 && BATCH_SIZE <= 1000)) || dts_die "BATCH_SIZE must be 1 to 1000"
auth=()
if [[ -n ${TOKEN:-} ]]; then auth=(-H "Authorization: Bearer $TOKEN"); fi

completed() {
	local c
	c=$(dts_curl "${auth[@]}" "$DTS_URL/stats" | tr -d '\n' | grep -o '"completed":[0-9]*' | head -n 1 | cut -d: -f2)
	[[ -n $c ]] || dts_die "GET /stats gave no completed count"
	printf '%s' "$c"
}

# One file per batch: {"jobs":[{"name":"noop","payload":N},...]}.
batches=0
for ((start = 0; start < COUNT; start += BATCH_SIZE)); do
	n=$((COUNT - start < BATCH_SIZE ? COUNT - start : BATCH_SIZE))
	{
		printf '{"jobs":['
		for ((i = 0; i < n; i++)); do
			((i == 0)) || printf ','
			printf '{"name":"noop","payload":%d}' $((start + i))
		done
		printf ']}'
	} >"$DTS_TMP/batch-$batches.json"
	batches=$((batches + 1))
done

before=$(completed)
t0=$(date +%s.%N)
export DTS_URL
post() {
	local code
	code=$(dts_curl -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' "$@")
	[[ $code == 200 || $code == 201 ]] || { echo "POST /submit_jobs: HTTP $code" >&2; exit 1; }
}
export -f post
for ((b = 0; b < batches; b++)); do printf '%s\0' "$DTS_TMP/batch-$b.json"; done |
	xargs -0 -P "$CONCURRENCY" -I{} bash -c 'post "$@" --data-binary @"$0" "$DTS_URL/submit_jobs"' {} "${auth[@]}" ||
	dts_die "a batch was refused"
t1=$(date +%s.%N)
awk -v n="$COUNT" -v a="$t0" -v b="$t1" 'BEGIN { printf "posted %d jobs in %.2f s\n", n, b - a }'

deadline=$((SECONDS + WAIT))
while :; do
	done_now=$(($(completed) - before))
	if ((done_now >= COUNT)); then break; fi
	if ((SECONDS >= deadline)); then
		printf '%d of %d completed after %d s: giving up\n' "$done_now" "$COUNT" "$WAIT" >&2
		exit 1
	fi
	sleep 0.2
done
t2=$(date +%s.%N)
awk -v n="$COUNT" -v a="$t0" -v b="$t2" 'BEGIN { printf "drained %d jobs in %.2f s: %.0f jobs/s\n", n, b - a, n / (b - a) }'
