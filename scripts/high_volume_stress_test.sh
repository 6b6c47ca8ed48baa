#!/usr/bin/env bash
# high_volume_stress_test.sh: submit COUNT (default 200) jobs of random types
# (cpu_intensive, io_intensive, mixed_workload, network_task, default) with
# CONCURRENCY (default 25) requests in flight, then wait up to WAIT (default
# 120) seconds for them to finish and print how they ended. Payloads are
# named like the original's: <type>_task_batch<b>_<i>, BATCH_SIZE (default 25)
# jobs per batch. SEED makes the choice of types repeatable.
# See lib.sh for the other settings and the exit status.
set -euo pipefail
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"

COUNT=${COUNT:-200}
CONCURRENCY=${CONCURRENCY:-25}
WAIT=${WAIT:-120}
BATCH_SIZE=${BATCH_SIZE:-25}
dts_init high_volume_stress_test
dts_uint BATCH_SIZE
((BATCH_SIZE >= 1)) || dts_die "BATCH_SIZE must be at least 1"
if [[ -n ${SEED:-} ]]; then
	dts_uint SEED
	RANDOM=$SEED
fi

names=(cpu_intensive io_intensive mixed_workload network_task default)
prefixes=(cpu_task io_task mixed_task network_task variable_task)
for ((n = 0; n < COUNT; n++)); do
	k=$((RANDOM % 5))
	dts_job "${names[k]}" "${prefixes[k]}_batch$((n / BATCH_SIZE + 1))_$((n % BATCH_SIZE + 1))"
done >"$DTS_TMP/jobs"
dts_submit_all <"$DTS_TMP/jobs"

dts_finish
exit "$DTS_RC"
