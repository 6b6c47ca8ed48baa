#!/usr/bin/env bash
# lib.sh: helpers shared by the dts load scripts in this directory. Source it,
# don't run it. A script calls dts_init, pipes its jobs (dts_job NAME PAYLOAD)
# into dts_submit_all, calls dts_finish and exits with $DTS_RC.
#
# Environment (every script):
#   SUBMITTER_URL     submitter base URL (default http://127.0.0.1:8000). Only
#                     localhost, 127.x.x.x and [::1] are accepted unless
#                     ALLOW_REMOTE=1.
#   COUNT             how many jobs to submit (default: per script)
#   CONCURRENCY       submissions in flight at once (default: per script)
#   DELAY             seconds between sequential submissions (default 0.1)
#   WAIT              seconds to wait for the accepted jobs to reach a final
#                     status (completed, failed, canceled); 0 = only take one
#                     snapshot of their statuses (default: per script)
#   MAX_TIME          curl --max-time per request, seconds (default 10)
#   POLL_CONCURRENCY  status requests in flight at once (default 16)
#   POLL_INTERVAL     seconds between status polling rounds (default 2)
#
# Exit status of the scripts: 0 when every submission was accepted and (with
# WAIT > 0) every accepted job reached a final status in time; 1 otherwise
# (a script may add its own expectations); 2 on bad usage.
#
# Results are kept in a private temporary directory, removed on exit:
#   submitted  one line per submission: A<TAB>job_id<TAB>name<TAB>payload or
#              R<TAB>http_code<TAB>name<TAB>payload (http_code 000: curl error)
#   final      job_id<TAB>status for jobs seen in a final status
#   open       job_id<TAB>status for the others, as last seen

# shellcheck shell=bash
# shellcheck disable=SC2034 # DTS_RC is read by the scripts

dts_die() {
	printf '%s: %s\n' "${DTS_SCRIPT:-dts}" "$*" >&2
	exit 2
}

# dts_uint NAME: the variable NAME must hold a non-negative integer.
dts_uint() {
	[[ ${!1-} =~ ^(0|[1-9][0-9]{0,8})$ ]] || dts_die "$1 must be a non-negative integer, got '${!1-}'"
}

# dts_check_url URL: accept an http(s) URL to a loopback host unless
# ALLOW_REMOTE=1; sets DTS_LOCAL=1 for a loopback host.
dts_check_url() {
	local url=$1 rest hostport host
	case $url in
	http://*) rest=${url#http://} ;;
	https://*) rest=${url#https://} ;;
	*) dts_die "SUBMITTER_URL must start with http:// or https://, got '$url'" ;;
	esac
	[[ $rest != *[[:space:]\?#@\\]* ]] || dts_die "SUBMITTER_URL must not hold spaces, '?', '#', '@' or '\\': '$url'"
	hostport=${rest%%/*}
	if [[ $hostport =~ ^(\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$ || $hostport =~ ^([A-Za-z0-9.-]+)(:[0-9]{1,5})?$ ]]; then
		host=$(printf '%s' "${BASH_REMATCH[1]}" | tr '[:upper:]' '[:lower:]')
	else
		dts_die "SUBMITTER_URL has no valid host[:port]: '$url'"
	fi
	DTS_LOCAL=0
	if [[ $host == localhost || $host == '[::1]' || $host =~ ^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]]; then
		DTS_LOCAL=1
	elif [[ ${ALLOW_REMOTE:-0} != 1 ]]; then
		dts_die "refusing non-local SUBMITTER_URL '$url' (host $host); set ALLOW_REMOTE=1 to allow it"
	fi
}

# dts_init SCRIPT_NAME: validate the environment and prepare the run.
dts_init() {
	DTS_SCRIPT=$1
	command -v curl >/dev/null 2>&1 || dts_die "curl is required"
	command -v xargs >/dev/null 2>&1 || dts_die "xargs is required"

	SUBMITTER_URL=${SUBMITTER_URL:-http://127.0.0.1:8000}
	dts_check_url "$SUBMITTER_URL"
	DTS_URL=$SUBMITTER_URL
	while [[ $DTS_URL == */ ]]; do DTS_URL=${DTS_URL%/}; done

	: "${DELAY:=0.1}" "${MAX_TIME:=10}" "${POLL_CONCURRENCY:=16}" "${POLL_INTERVAL:=2}"
	dts_uint COUNT
	dts_uint CONCURRENCY
	dts_uint WAIT
	dts_uint MAX_TIME
	dts_uint POLL_CONCURRENCY
	dts_uint POLL_INTERVAL
	[[ $DELAY =~ ^[0-9]{1,4}(\.[0-9]{1,3})?$ ]] || dts_die "DELAY must be a number of seconds, got '$DELAY'"
	((CONCURRENCY >= 1)) || dts_die "CONCURRENCY must be at least 1"
	((MAX_TIME >= 1)) || dts_die "MAX_TIME must be at least 1"
	((POLL_CONCURRENCY >= 1)) || dts_die "POLL_CONCURRENCY must be at least 1"
	((POLL_INTERVAL >= 1)) || dts_die "POLL_INTERVAL must be at least 1"

	DTS_HAVE_JQ=0
	if command -v jq >/dev/null 2>&1; then DTS_HAVE_JQ=1; fi
	DTS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/dts-load.XXXXXX")
	# shellcheck disable=SC2064 # expand DTS_TMP now
	trap "rm -rf -- '$DTS_TMP'" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	: >"$DTS_TMP/submitted"
	DTS_MAX_TIME=$MAX_TIME
	DTS_RC=0
	DTS_START=$SECONDS
	export DTS_URL DTS_TMP DTS_MAX_TIME DTS_LOCAL DTS_HAVE_JQ
	export -f dts_curl dts_json_str dts_json_field dts_submit_one dts_poll_one

	printf '%s: %s jobs to %s (concurrency %s)\n' "$DTS_SCRIPT" "$COUNT" "$DTS_URL" "$CONCURRENCY"
}

# dts_curl ARGS...: curl restricted to http(s), never globbing, never
# following redirects, bypassing proxies for a loopback SUBMITTER_URL.
dts_curl() {
	if [[ $DTS_LOCAL == 1 ]]; then
		curl -sS --globoff --proto '=http,https' --noproxy '*' --connect-timeout 5 --max-time "$DTS_MAX_TIME" "$@"
	else
		curl -sS --globoff --proto '=http,https' --connect-timeout 5 --max-time "$DTS_MAX_TIME" "$@"
	fi
}

# dts_json_str S: S as a JSON string literal.
dts_json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\n'/\\n}
	s=${s//$'\r'/\\r}
	s=${s//$'\t'/\\t}
	printf '"%s"' "$s"
}

# dts_json_field FIELD < JSON: the top-level string or number FIELD, or
# nothing. Uses jq when installed; otherwise takes the first "FIELD": match
# anywhere in the text (good enough for the flat answers of the submitter).
dts_json_field() {
	if [[ $DTS_HAVE_JQ == 1 ]]; then
		jq -r --arg f "$1" 'if type == "object" then .[$f] // empty | tostring else empty end' 2>/dev/null || true
	else
		tr -d '\n' | grep -o "\"$1\"[[:space:]]*:[[:space:]]*\"\{0,1\}[A-Za-z0-9_.:-]*" | head -n 1 |
			sed 's/^[^:]*:[[:space:]]*"\{0,1\}//' || true
	fi
}

# dts_job NAME PAYLOAD: one job for dts_submit_all, NUL-separated.
dts_job() {
	printf '%s\0%s\0' "$1" "$2"
}

# dts_submit_one NAME PAYLOAD: POST one job, print one line about it and
# record it in $DTS_TMP/submitted.
dts_submit_one() {
	local name=$1 payload=$2 body resp code rc=0 id err
	body="{\"name\":$(dts_json_str "$name"),\"payload\":$(dts_json_str "$payload")}"
	resp=$(dts_curl -X POST -H 'Content-Type: application/json' -H 'Accept: application/json' \
		--data-binary "$body" -w '\n%{http_code}' "$DTS_URL/submit_job" 2>"$DTS_TMP/curl.$$") || rc=$?
	code=${resp##*$'\n'}
	resp=${resp%$'\n'*}
	[[ $code =~ ^[0-9]{3}$ ]] || code=000
	if ((rc != 0)); then
		err=$(head -n 1 "$DTS_TMP/curl.$$")
		code=000
	fi
	rm -f -- "$DTS_TMP/curl.$$"
	if [[ $code == 2[0-9][0-9] ]]; then
		id=$(printf '%s' "$resp" | dts_json_field job_id)
		[[ $id =~ ^[A-Za-z0-9_-]{1,64}$ ]] || id=""
		printf 'A\t%s\t%s\t%s\n' "$id" "$name" "$payload" >>"$DTS_TMP/submitted"
		printf '  %s %-15s %-26s -> job %s\n' "$code" "$name" "$payload" "${id:-(no job_id in response)}"
	else
		printf 'R\t%s\t%s\t%s\n' "$code" "$name" "$payload" >>"$DTS_TMP/submitted"
		if [[ $code == 000 ]]; then
			printf '  ERR %-15s %-26s -> %s\n' "$name" "$payload" "${err:-curl failed}"
		else
			printf '  %s %-15s %-26s -> rejected: %.120s\n' "$code" "$name" "$payload" "$(printf '%s' "$resp" | tr -d '\n')"
		fi
	fi
}

# dts_submit_all: submit the jobs read from stdin (as written by dts_job),
# one at a time DELAY apart when CONCURRENCY is 1, else CONCURRENCY at once.
dts_submit_all() {
	local name payload first=1
	if ((CONCURRENCY == 1)); then
		while IFS= read -r -d '' name && IFS= read -r -d '' payload; do
			((first)) || sleep "$DELAY"
			first=0
			dts_submit_one "$name" "$payload"
		done
	else
		# shellcheck disable=SC2016 # expanded by the child bash
		xargs -0 -r -n 2 -P "$CONCURRENCY" bash -c 'dts_submit_one "$1" "$2"' dts_submit_one
	fi
}

# dts_poll_one ID: GET /jobs/ID and append "ID<TAB>status" to
# $DTS_TMP/round; the status is http_CODE on a non-200 answer and
# unreachable on a curl error.
dts_poll_one() {
	local id=$1 resp code status
	resp=$(dts_curl -H 'Accept: application/json' -w '\n%{http_code}' "$DTS_URL/jobs/$id" 2>/dev/null) || resp=$'\n000'
	code=${resp##*$'\n'}
	resp=${resp%$'\n'*}
	if [[ $code == 000 ]]; then
		status=unreachable
	elif [[ $code != 200 ]]; then
		status=http_$code
	else
		status=$(printf '%s' "$resp" | dts_json_field status)
		status=${status:-unknown}
	fi
	printf '%s\t%s\n' "$id" "$status" >>"$DTS_TMP/round"
}

# dts_count_statuses FILE: "status count" lines, final statuses first.
dts_count_statuses() {
	awk -F'\t' '
		{ c[$2]++ }
		END {
			n = split("completed failed canceled pending leased retrying", order, " ")
			for (i = 1; i <= n; i++) if (order[i] in c) { printf "%s %d\n", order[i], c[order[i]]; delete c[order[i]] }
			for (s in c) printf "%s %d\n", s, c[s]
		}' "$1"
}

# dts_inline FILE: the counts of dts_count_statuses on one line.
dts_inline() {
	dts_count_statuses "$1" | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 } END { if (NR == 0) printf "none" }'
}

# dts_poll_round: poll every job in $DTS_TMP/open once; move those now final
# to $DTS_TMP/final.
dts_poll_round() {
	: >"$DTS_TMP/round"
	# shellcheck disable=SC2016 # expanded by the child bash
	cut -f1 "$DTS_TMP/open" | xargs -r -n 1 -P "$POLL_CONCURRENCY" bash -c 'dts_poll_one "$1"' dts_poll_one
	awk -F'\t' '$2 == "completed" || $2 == "failed" || $2 == "canceled"' "$DTS_TMP/round" >>"$DTS_TMP/final"
	awk -F'\t' '!($2 == "completed" || $2 == "failed" || $2 == "canceled")' "$DTS_TMP/round" >"$DTS_TMP/open"
}

# dts_finish: print the summary of the run and, unless WAIT is 0, wait for
# the accepted jobs to reach a final status. Sets DTS_RC.
dts_finish() {
	local f=$DTS_TMP/submitted submitted accepted rejected noid tracked deadline left elapsed nap
	submitted=$(awk 'END { print NR }' "$f")
	accepted=$(awk -F'\t' '$1 == "A"' "$f" | awk 'END { print NR }')
	rejected=$(awk -F'\t' '$1 == "R"' "$f" | awk 'END { print NR }')
	noid=$(awk -F'\t' '$1 == "A" && $2 == ""' "$f" | awk 'END { print NR }')

	printf '\n== %s summary ==\n' "$DTS_SCRIPT"
	printf 'submitted %d in %ds: accepted %d, rejected %d' "$submitted" $((SECONDS - DTS_START)) "$accepted" "$rejected"
	if ((rejected > 0)); then
		printf ' (%s)' "$(awk -F'\t' '$1 == "R" { c[$2 == "000" ? "curl error" : "HTTP " $2]++ } END { for (k in c) printf "%s%s: %d", (n++ ? ", " : ""), k, c[k] }' "$f")"
		DTS_RC=1
	fi
	printf '\n'
	if ((noid > 0)); then
		printf 'warning: %d accepted jobs had no job_id in the response and cannot be tracked\n' "$noid"
		DTS_RC=1
	fi

	awk -F'\t' '$1 == "A" && $2 != "" { print $2 "\tsubmitted" }' "$f" >"$DTS_TMP/open"
	: >"$DTS_TMP/final"
	tracked=$(awk 'END { print NR }' "$DTS_TMP/open")
	if ((tracked == 0)); then
		return 0
	fi

	if ((WAIT == 0)); then
		dts_poll_round
		printf 'statuses now (WAIT=0, not waiting): %s\n' "$(cat "$DTS_TMP/final" "$DTS_TMP/open" | dts_inline /dev/stdin)"
		return 0
	fi

	printf 'waiting up to %ds for %d jobs to reach a final status (completed, failed, canceled)\n' "$WAIT" "$tracked"
	deadline=$((SECONDS + WAIT))
	while :; do
		dts_poll_round
		left=$(awk 'END { print NR }' "$DTS_TMP/open")
		elapsed=$((SECONDS - DTS_START))
		printf '  t+%ds: %d/%d final (%s)' "$elapsed" $((tracked - left)) "$tracked" "$(dts_inline "$DTS_TMP/final")"
		if ((left > 0)); then printf '; open: %s' "$(dts_inline "$DTS_TMP/open")"; fi
		printf '\n'
		((left > 0)) || break
		((SECONDS < deadline)) || break
		nap=$((deadline - SECONDS))
		if ((nap > POLL_INTERVAL)); then nap=$POLL_INTERVAL; fi
		if ((nap < 1)); then nap=1; fi
		sleep "$nap"
	done

	printf 'final statuses:\n'
	dts_count_statuses "$DTS_TMP/final" | awk '{ printf "  %-10s %d\n", $1, $2 }'
	if ((left > 0)); then
		printf 'not final after %ds: %d (%s)\n' "$WAIT" "$left" "$(dts_inline "$DTS_TMP/open")"
		DTS_RC=1
	fi
	printf 'by job name:\n'
	awk -F'\t' '
		FNR == NR { if ($1 == "A" && $2 != "") name[$2] = $3; next }
		{ k = name[$1] "\t" $2; c[k]++ }
		END { for (k in c) { split(k, p, "\t"); printf "  %-15s %-10s %d\n", p[1], p[2], c[k] } }' \
		"$f" "$DTS_TMP/final" "$DTS_TMP/open" | sort
}

# dts_expect_invalid_failed: check that jobs whose payload contains
# invalid_job ended failed and the others completed (for final jobs only).
# Sets DTS_RC=1 on a mismatch.
dts_expect_invalid_failed() {
	local bad
	bad=$(awk -F'\t' '
		FNR == NR { if ($1 == "A" && $2 != "") payload[$2] = $4; next }
		{
			want = index(payload[$1], "invalid_job") ? "failed" : "completed"
			if ($2 != want) printf "  job %s (%s): %s, expected %s\n", $1, payload[$1], $2, want
		}' "$DTS_TMP/submitted" "$DTS_TMP/final")
	printf 'expected: payloads with invalid_job fail (after retries), the others complete\n'
	if [[ -n $bad ]]; then
		printf 'unexpected outcomes:\n%s\n' "$bad"
		DTS_RC=1
	else
		printf '  all %d final jobs as expected\n' "$(awk 'END { print NR }' "$DTS_TMP/final")"
	fi
}
