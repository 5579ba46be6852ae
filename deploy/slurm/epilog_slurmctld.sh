#!/bin/bash
# shellcheck disable=SC2016  # $names in single quotes are jq variables, not shell ones
# Joulecast EpilogSlurmctld (example): when a job ends, however it ends,
# releases its power reservation with DELETE /v1/jobs/{source}/{job_id}.
#
#   slurm.conf:  EpilogSlurmctld=/etc/slurm/joulecast-epilog.sh
#
# One rule for every job (completed, failed, cancelled, timed out, requeued):
# the job stops counting against the power cap at once. Its history (the run
# with its measured energy) comes from the sacct import instead
# (sacct-import.sh), for two reasons:
#   * at epilog time the accounting record may not be final: the energy of
#     the job's steps (ConsumedEnergy) is gathered by the slurmd's and reaches
#     slurmdbd asynchronously, so the epilog cannot reliably know it;
#   * POST .../finish needs measured values (energy or power); a finish
#     without them cannot become a run.
# Consequence: between this DELETE and the next import (up to the import
# interval plus its settling delay), the job's energy is neither "committed"
# nor "consumed" in its account's budget, which looks that much larger.
#
# Slurm only logs a failing EpilogSlurmctld; this script always exits 0.
# An end this script misses (slurmctld kills it when it requeues the job, or
# the service cannot be reached) is caught by reconcile.sh.
# A 404 (the job was never recorded: the prolog failed open, or the job was
# refused with 409) is normal.
#
# Runs as SlurmctldUser on the controller. Needs bash, curl and jq. Settings:
# the defaults below, overridden by /etc/slurm/joulecast-slurm.conf (or the
# file JOULECAST_SLURM_CONF names), then by JOULECAST_* in the environment.

set -u
export PATH=/usr/bin:/bin:/usr/sbin:/sbin
umask 077

# Settings given in the environment (JOULECAST_*, e.g. a run by hand or a
# systemd Environment= line) win over the defaults and the settings file.
from_environment=$(
	names=("${!JOULECAST_@}")
	((${#names[@]} == 0)) || declare -p "${names[@]}"
)

JOULECAST_URL="http://joulecast.example.org:8080"
JOULECAST_TOKEN_FILE="/etc/slurm/joulecast.token"
JOULECAST_TIMEOUT_S=5
JOULECAST_SOURCE=""
JOULECAST_CURL=curl
JOULECAST_JQ=jq

conf=${JOULECAST_SLURM_CONF:-/etc/slurm/joulecast-slurm.conf}
if [[ -r $conf ]]; then
	# shellcheck source=/dev/null
	. "$conf"
fi
eval "$from_environment"

log() { # priority message...
	local priority=$1 msg
	shift
	msg=${*//[[:cntrl:]]/ } # job names may hold newlines
	# syslog, and standard error (which slurmctld may log at debug level).
	logger -t joulecast-epilog -p "daemon.$priority" -- "job ${SLURM_JOB_ID:-?}: $msg" 2>/dev/null || true
	printf 'joulecast-epilog: %s: job %s: %s\n' "$priority" "${SLURM_JOB_ID:-?}" "$msg" >&2
}

give_up() {
	log err "$*; if the job was recorded, it keeps its power reservation until reconcile.sh" \
		"releases it (or DELETE /v1/jobs/...; GET /v1/jobs flags it stale after twice its predicted TtS)"
	exit 0
}

[[ -n ${SLURM_JOB_ID:-} ]] || give_up "SLURM_JOB_ID is not set (not run by slurmctld?)"
command -v "$JOULECAST_CURL" >/dev/null || give_up "curl ($JOULECAST_CURL) not found"
command -v "$JOULECAST_JQ" >/dev/null || give_up "jq ($JOULECAST_JQ) not found"

token=""
if [[ -r $JOULECAST_TOKEN_FILE ]]; then
	read -r token <"$JOULECAST_TOKEN_FILE" || true
fi
[[ $token =~ ^[A-Za-z0-9._~+/=-]+$ ]] || give_up "no valid token in $JOULECAST_TOKEN_FILE"

# The same id as the prolog reported.
job_id=$SLURM_JOB_ID
if [[ -n ${SLURM_ARRAY_JOB_ID:-} && -n ${SLURM_ARRAY_TASK_ID:-} ]]; then
	job_id="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
fi
source_name=${JOULECAST_SOURCE:-${SLURM_CLUSTER_NAME:-}}
[[ -n $source_name ]] || give_up "neither JOULECAST_SOURCE nor SLURM_CLUSTER_NAME is set"

# Path segments, percent-encoded.
path=$("$JOULECAST_JQ" -rn --arg s "$source_name" --arg j "$job_id" \
	'"/v1/jobs/\($s | @uri)/\($j | @uri)"') || give_up "could not build the path"

tmp=$(mktemp -d) || give_up "mktemp failed"
trap 'rm -rf "$tmp"' EXIT

code=000
for attempt in 1 2 3; do
	code=$("$JOULECAST_CURL" --disable -sS --proto =http,https \
		--max-time "$JOULECAST_TIMEOUT_S" --connect-timeout 2 \
		--config <(printf 'header = "Authorization: Bearer %s"\n' "$token") \
		-H 'Accept: application/json' -X DELETE \
		-o "$tmp/answer" -w '%{http_code}' \
		"$JOULECAST_URL$path" 2>"$tmp/err") || true
	[[ $code =~ ^[0-9]{3}$ ]] || code=000
	if [[ $code != 000 && $code != 5* ]] || ((attempt == 3)); then
		break
	fi
	sleep 2
done

how="exit ${SLURM_JOB_EXIT_CODE2:-${SLURM_JOB_EXIT_CODE:-?}}"
case $code in
204)
	log info "ended ($how): power reservation released"
	;;
404)
	log debug "ended ($how): was not recorded as running; nothing to release"
	;;
000)
	give_up "ended ($how): no answer from $JOULECAST_URL: $(head -c 300 "$tmp/err")"
	;;
*)
	give_up "ended ($how): the service answered HTTP $code:" \
		"$("$JOULECAST_JQ" -r '.detail // empty' "$tmp/answer" 2>/dev/null | head -c 300)"
	;;
esac
exit 0
