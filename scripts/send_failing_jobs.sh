#!/usr/bin/env bash
# send_failing_jobs.sh: exercise retries and the dead-letter queue like the
# original script. Phase 1 submits 3 test_job jobs one at a time with
# payloads invalid_job_content_<i>; after PHASE_PAUSE (default 2) seconds,
# phase 2 submits the remaining COUNT-3 (default 10) default jobs at once
# (CONCURRENCY defaults to all of them): payload invalid_job_mixed_<i> for
# i = 3, 6, 9, ... and valid_task_<i> otherwise.
#
# Every payload containing invalid_job fails each attempt, so that job is
# retried with backoff and then fails for good; the others run the worker's
# fallback (up to 50 s each) and complete. WAIT defaults to 150 s to cover
# both; once all jobs are final the script checks those outcomes and exits 1
# on a mismatch. See lib.sh for the other settings and the exit status.
set -euo pipefail
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"

COUNT=${COUNT:-13}
dts_uint COUNT
phase1=$((COUNT < 3 ? COUNT : 3))
phase2=$((COUNT - phase1))
CONCURRENCY=${CONCURRENCY:-$((phase2 > 0 ? phase2 : 1))}
WAIT=${WAIT:-150}
PHASE_PAUSE=${PHASE_PAUSE:-2}
dts_init send_failing_jobs
dts_uint PHASE_PAUSE

for ((i = 1; i <= phase1; i++)); do
	dts_job test_job "invalid_job_content_$i"
done >"$DTS_TMP/jobs1"
for ((i = 1; i <= phase2; i++)); do
	if ((i % 3 == 0)); then
		dts_job default "invalid_job_mixed_$i"
	else
		dts_job default "valid_task_$i"
	fi
done >"$DTS_TMP/jobs2"

printf 'phase 1: %d invalid test_job jobs, one at a time\n' "$phase1"
parallel=$CONCURRENCY
CONCURRENCY=1
dts_submit_all <"$DTS_TMP/jobs1"
CONCURRENCY=$parallel
if ((phase2 > 0)); then
	sleep "$PHASE_PAUSE"
	printf 'phase 2: %d default jobs (every third invalid), %d at a time\n' "$phase2" "$CONCURRENCY"
	dts_submit_all <"$DTS_TMP/jobs2"
fi

dts_finish
if ((WAIT > 0)); then
	dts_expect_invalid_failed
fi
exit "$DTS_RC"
