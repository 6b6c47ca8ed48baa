#!/usr/bin/env bash
# send_cpu_intensive_jobs.sh: submit COUNT (default 10) cpu_intensive jobs with payloads
# cpu_heavy_task_<i>, one at a time DELAY (default 0.1) seconds apart unless
# CONCURRENCY > 1, then wait up to WAIT (default 120) seconds for them to
# finish and print how they ended.
# See lib.sh for the other settings and the exit status.
set -euo pipefail
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"

COUNT=${COUNT:-10}
CONCURRENCY=${CONCURRENCY:-1}
WAIT=${WAIT:-120}
dts_init send_cpu_intensive_jobs

for ((i = 1; i <= COUNT; i++)); do
	dts_job cpu_intensive "cpu_heavy_task_$i"
done >"$DTS_TMP/jobs"
dts_submit_all <"$DTS_TMP/jobs"

dts_finish
exit "$DTS_RC"
