#!/bin/bash
# shellcheck disable=SC2016  # $names in single quotes are jq variables, not shell ones
# Joulecast PrologSlurmctld (example): reports a job's start with
# POST /v1/jobs, which re-checks admission and reserves the job's power
# atomically. This is where the power cap is enforced.
#
#   slurm.conf:  PrologSlurmctld=/etc/slurm/joulecast-prolog.sh
#
# Exit status, and what Slurm does with it:
#   0  the job was recorded, or the service could not be reached (failing
#      open, logged; JOULECAST_FAIL_OPEN=false fails closed instead): it runs.
#   1  the service refused to record the job (400/401/403/422: a setup to
#      fix), or answered 409 with an admission answer: the job no longer
#      fits under the power cap or its account's energy budget, and nothing
#      was stored. Per the Slurm documentation, a failed PrologSlurmctld
#      requeues a batch job (back to PENDING, to be scheduled again later)
#      and cancels an interactive one (salloc/srun), which cannot be
#      requeued. A batch job that is not requeueable (--no-requeue,
#      JobRequeue=0) may be cancelled too, and recent versions hold a job
#      (JobHeldAdmin) after MaxBatchRequeue automatic requeues: check with
#      your Slurm version.
# For accounting only (never hold a job back), set JOULECAST_FORCE=true: the
# job is then recorded even when it does not fit.
#
# Runs as SlurmctldUser (SlurmUser) on the controller, once per job start,
# with no PATH of its own. Needs bash, curl and jq. All of the job's fields
# go into the JSON body through `jq --arg` (never spliced into JSON or a
# command); the token goes to curl through a config on a pipe, not argv.
#
# Settings: the defaults below, overridden by /etc/slurm/joulecast-slurm.conf
# (shell syntax; or the file JOULECAST_SLURM_CONF names) when it exists, then
# by JOULECAST_* in the environment.

set -u
export PATH=/usr/bin:/bin:/usr/sbin:/sbin
umask 077
prolog_started_s=$(date +%s)

# Settings given in the environment (JOULECAST_*, e.g. a run by hand or a
# systemd Environment= line) win over the defaults and the settings file.
from_environment=$(
	names=("${!JOULECAST_@}")
	((${#names[@]} == 0)) || declare -p "${names[@]}"
)

JOULECAST_URL="http://joulecast.example.org:8080"
# A `schedule` token, readable by SlurmUser only.
JOULECAST_TOKEN_FILE="/etc/slurm/joulecast.token"
JOULECAST_TIMEOUT_S=5
# true: when the service cannot be reached or answers 5xx, let the job run
# unrecorded (exit 0). false: exit 1, and the job is requeued or cancelled.
JOULECAST_FAIL_OPEN=true
# Jobs that ran unrecorded because the service could not be reached are
# kept here (a directory writable by SlurmUser), with the report that could
# not be sent: the next prolog that reaches the service reports them
# (POST /v1/jobs/unreserved, counted on its /metrics), and reconcile.sh
# records those still running (forced), so that their power counts under
# the caps again.
JOULECAST_SPOOL_DIR=/var/spool/joulecast-slurm
# true: record the job even when it does not fit (accounting only).
JOULECAST_FORCE=false
# Where the application tag comes from: jobname, comment or wckey (as the
# importer's app_from and job_submit.lua's APP_FROM).
JOULECAST_APP_FROM=jobname
# The job's system in Joulecast; empty: SLURM_CLUSTER_NAME.
JOULECAST_SOURCE=""
# Send the allocated nodes (then they must be in Joulecast's node registry,
# or the report is refused with 422): false sends the node count only.
JOULECAST_SEND_NODE_LIST=true
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
	logger -t joulecast-prolog -p "daemon.$priority" -- "job ${SLURM_JOB_ID:-?}: $msg" 2>/dev/null || true
	printf 'joulecast-prolog: %s: job %s: %s\n' "$priority" "${SLURM_JOB_ID:-?}" "$msg" >&2
}

# The job cannot be recorded; the service is not to blame for the job.
give_up() {
	log err "$*; the job runs without a power reservation"
	exit 0
}

# A job let through unrecorded, kept for the service to count later.
remember_unreserved() {
	if [[ ! -d $JOULECAST_SPOOL_DIR || ! -w $JOULECAST_SPOOL_DIR ]]; then
		log err "$JOULECAST_SPOOL_DIR is missing or not writable: the service will not count this job as unreserved"
		return
	fi
	local id=${job_id:-${SLURM_JOB_ID:-}}
	[[ -n $id ]] || return
	# The report, compact JSON on one line, for reconcile.sh.
	printf '%s %s %s\n' "$id" "$prolog_started_s" "${body:-}" >>"$JOULECAST_SPOOL_DIR/unreserved"
}

# The service could not be asked.
unavailable() {
	if [[ $JOULECAST_FAIL_OPEN == true ]]; then
		log warning "$*; failing open: the job runs without a power reservation"
		remember_unreserved
		exit 0
	fi
	log err "$*; JOULECAST_FAIL_OPEN=false: failing the prolog (Slurm requeues or cancels the job)"
	exit 1
}

[[ -n ${SLURM_JOB_ID:-} ]] || give_up "SLURM_JOB_ID is not set (not run by slurmctld?)"
command -v "$JOULECAST_CURL" >/dev/null || unavailable "curl ($JOULECAST_CURL) not found"
command -v "$JOULECAST_JQ" >/dev/null || unavailable "jq ($JOULECAST_JQ) not found"
case $JOULECAST_FORCE in
true | false) ;;
*) give_up "JOULECAST_FORCE must be true or false" ;;
esac

token=""
if [[ -r $JOULECAST_TOKEN_FILE ]]; then
	read -r token <"$JOULECAST_TOKEN_FILE" || true
fi
# The token goes into a curl config line: nothing but token characters.
[[ $token =~ ^[A-Za-z0-9._~+/=-]+$ ]] || unavailable "no valid token in $JOULECAST_TOKEN_FILE"

# The job's id as sacct shows it: array tasks as ARRAYID_TASKID.
job_id=$SLURM_JOB_ID
if [[ -n ${SLURM_ARRAY_JOB_ID:-} && -n ${SLURM_ARRAY_TASK_ID:-} ]]; then
	job_id="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
fi
source_name=${JOULECAST_SOURCE:-${SLURM_CLUSTER_NAME:-}}
[[ -n $source_name ]] || give_up "neither JOULECAST_SOURCE nor SLURM_CLUSTER_NAME is set"

# Slurm writes "(null)" for some unset values (SLURM_JOB_ACCOUNT without
# accounting): those are absent.
present() { [[ -n $1 && $1 != "(null)" ]] && printf '%s' "$1"; }

# The application tag a free-text name stands for, by the service's rule
# (validate::tag_from_name in Joulecast): each byte outside the tag's
# characters becomes "-", leading characters other than a letter or digit are
# dropped, the rest is cut to 128; "unnamed" when nothing is left. Every job
# is reported: one whose name is not a tag reserves conservatively until its
# application has history.
joulecast_tag() {
	local LC_ALL=C
	local tag=${1//[^A-Za-z0-9._:@+=-]/-}
	while [[ -n $tag && ! $tag =~ ^[A-Za-z0-9] ]]; do
		tag=${tag:1}
	done
	tag=${tag:0:128}
	printf '%s' "${tag:-unnamed}"
}

case $JOULECAST_APP_FROM in
jobname) name=${SLURM_JOB_NAME:-} ;;
comment) name=${SLURM_JOB_COMMENT:-} ;;
wckey) name=${SLURM_WCKEY:-} ;;
*) give_up "JOULECAST_APP_FROM must be jobname, comment or wckey" ;;
esac
app=$(joulecast_tag "$(present "$name")")

node_list=""
if [[ $JOULECAST_SEND_NODE_LIST == true ]]; then
	node_list=${SLURM_JOB_NODELIST:-}
fi

# The time limit, from the job's expected end: slurmctld sets the end time of
# a starting job to its start plus its time limit (a year when unlimited).
# Slurm 22.05 does not set those variables: then the job's TimeLimit, as
# `scontrol show job` prints it ([days-]hours:minutes:seconds, minutes:seconds
# or minutes; UNLIMITED is left out).
limit_s=""
if [[ ${SLURM_JOB_START_TIME:-} =~ ^[0-9]+$ && ${SLURM_JOB_END_TIME:-} =~ ^[0-9]+$ ]]; then
	d=$((SLURM_JOB_END_TIME - SLURM_JOB_START_TIME))
	if ((d > 0 && d < 365 * 86400)); then
		limit_s=$d
	fi
elif [[ ${SLURM_JOB_ID:-} =~ ^[0-9]+$ ]]; then
	limit=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | grep -o 'TimeLimit=[^ ]*' | head -1)
	limit=${limit#TimeLimit=}
	days=0
	if [[ $limit =~ ^([0-9]+)-(.*)$ ]]; then
		days=${BASH_REMATCH[1]}
		limit=${BASH_REMATCH[2]}
	fi
	if [[ $limit =~ ^([0-9]+):([0-9]+):([0-9]+)$ ]]; then
		limit_s=$((10#$days * 86400 + 10#${BASH_REMATCH[1]} * 3600 + 10#${BASH_REMATCH[2]} * 60 + 10#${BASH_REMATCH[3]}))
	elif [[ $limit =~ ^([0-9]+):([0-9]+)$ ]]; then
		limit_s=$((10#$days * 86400 + 10#${BASH_REMATCH[1]} * 60 + 10#${BASH_REMATCH[2]}))
	elif [[ $limit =~ ^[0-9]+$ ]]; then
		limit_s=$((10#$days * 86400 + 10#$limit * 60))
	fi
	((${limit_s:-0} > 0)) || limit_s=""
fi

# When the job started: Slurm's own time where the environment has it (not in
# 22.05), else this prolog's, which runs as the job starts. The service
# refuses a start dated at or before an end it was already told of, so a
# start that reaches it late (after a timeout here, overtaken by the epilog)
# cannot reserve power for a job that is gone.
start_s=${SLURM_JOB_START_TIME:-$prolog_started_s}

body=$("$JOULECAST_JQ" -cn \
	--arg source "$source_name" \
	--arg job_id "$job_id" \
	--arg app "$app" \
	--arg nodes "${SLURM_JOB_NUM_NODES:-}" \
	--arg node_list "$node_list" \
	--arg partition "$(present "${SLURM_JOB_PARTITION:-}")" \
	--arg account "$(present "${SLURM_JOB_ACCOUNT:-}")" \
	--arg start "$start_s" \
	--arg limit "$limit_s" \
	--argjson force "$JOULECAST_FORCE" \
	'def opt(k; v): if v == "" then {} else {(k): v} end;
	{source: $source, job_id: $job_id, app: $app}
	+ (if ($nodes | test("^[0-9]+$")) then {nodes: ($nodes | tonumber)} else {} end)
	+ opt("node_list"; $node_list)
	+ opt("partition"; $partition)
	+ opt("account"; $account)
	+ (if ($start | test("^[0-9]+$")) then {started_at: ($start | tonumber | todate)} else {} end)
	+ (if $limit == "" then {} else {time_limit_s: ($limit | tonumber)} end)
	+ {force: $force}') || give_up "could not build the request"

tmp=$(mktemp -d) || unavailable "mktemp failed"
trap 'rm -rf "$tmp"' EXIT

# POSTs standard input to $1 (a path of the service), the answer to $2 and
# curl's errors to $tmp/err; prints the HTTP status, 000 without an answer.
post_json() {
	local code
	code=$("$JOULECAST_CURL" --disable -sS --proto =http,https \
		--max-time "$JOULECAST_TIMEOUT_S" --connect-timeout 2 \
		--config <(printf 'header = "Authorization: Bearer %s"\n' "$token") \
		-H 'Content-Type: application/json' -H 'Accept: application/json' \
		--data-binary @- -o "$2" -w '%{http_code}' \
		"$JOULECAST_URL$1" 2>"$tmp/err") || true
	[[ $code =~ ^[0-9]{3}$ ]] || code=000
	printf '%s' "$code"
}

# POST /v1/jobs is idempotent (200 when already stored): one retry is safe.
report() {
	code=000
	for attempt in 1 2; do
		code=$(printf '%s' "$body" | post_json /v1/jobs "$tmp/answer")
		if [[ $code != 000 && $code != 5* ]] || ((attempt == 2)); then
			break
		fi
		sleep 1
	done
}
report
# Nodes missing from the service's registry: reserved by node count instead,
# rather than not at all.
if [[ $code == 422 ]] && "$JOULECAST_JQ" -e '[.errors[]?.field] == ["node_list"]' "$tmp/answer" >/dev/null 2>&1; then
	log warning "the service does not know the job's nodes ($("$JOULECAST_JQ" -r '.errors[0].reason' "$tmp/answer" 2>/dev/null | head -c 300)); reporting the job without its node list"
	body=$(printf '%s' "$body" | "$JOULECAST_JQ" -c 'del(.node_list)')
	report
fi

detail() { # the problem's detail, or curl's error
	"$JOULECAST_JQ" -r '(.detail // "") + ([.errors[]? | "\(.field): \(.reason)"]
		| if length > 0 then " (" + join(", ") + ")" else "" end)' "$tmp/answer" 2>/dev/null | head -c 500
}

# Report the jobs that earlier prologs let through unrecorded (one prolog at
# a time takes the spool file; a failed report puts it back). Those with
# their report go on to `to-register`, for reconcile.sh to record the ones
# still running.
report_unreserved() {
	local spool=$JOULECAST_SPOOL_DIR/unreserved taken sent
	[[ -s $spool ]] || return 0
	exec 8>>"$JOULECAST_SPOOL_DIR/lock" || return 0
	flock -n 8 || return 0
	taken=$JOULECAST_SPOOL_DIR/sending.$$
	mv "$spool" "$taken" 2>/dev/null || return 0
	sent=$("$JOULECAST_JQ" -R -s -c --arg s "$source_name" '{source: $s, jobs: [split("\n")[]
		| select(test("^[A-Za-z0-9][A-Za-z0-9._:@+=-]* [0-9]+( |$)")) | split(" ") | {job_id: .[0], started_at: (.[1] | tonumber | todate)}]}' \
		"$taken" | post_json /v1/jobs/unreserved "$tmp/unreserved")
	if [[ $sent == 200 ]]; then
		log info "reported $("$JOULECAST_JQ" -r '.counted' "$tmp/unreserved" 2>/dev/null) job(s) that ran unreserved while the service was unreachable"
		# Kept for reconcile.sh; if that cannot be written, the jobs stay
		# where they were (counting them again changes nothing).
		awk 'NF >= 3' "$taken" >>"$JOULECAST_SPOOL_DIR/to-register" || cat "$taken" >>"$spool"
	elif [[ $sent == 4* && $sent != 401 && $sent != 403 && $sent != 429 ]]; then
		# Refused as it is: sending it again cannot help.
		log err "the service refused the report of jobs that ran unreserved (HTTP $sent); dropped: $(tr '\n' ' ' <"$taken" | head -c 300)"
	else
		cat "$taken" >>"$spool"
	fi
	rm -f "$taken"
}

case $code in
200 | 201)
	log info "$("$JOULECAST_JQ" -r --arg code "$code" \
		'"recorded (HTTP \($code)): app \(.app), reserved \(.reserved_w) W (\(.reserved_basis))"' \
		"$tmp/answer" 2>/dev/null || echo "recorded (HTTP $code)")"
	report_unreserved
	exit 0
	;;
409)
	if "$JOULECAST_JQ" -e 'has("admission")' "$tmp/answer" >/dev/null 2>&1; then
		reasons=$("$JOULECAST_JQ" -r '[.admission.reasons[]?] | join("; ")' "$tmp/answer" 2>/dev/null | head -c 1000)
		log warning "does not fit: ${reasons:-$(detail)}; failing the prolog so that Slurm requeues (or cancels) the job"
		exit 1
	fi
	# Another conflict: this job id is already a finished run. Slurm's job
	# ids started again (a new StateSaveLocation, MaxJobId wrapped): every
	# new job collides with an old run. It runs unreserved, and is counted
	# so (jobs_run_unreserved_total, and its alert) rather than silently.
	# Without its report: recording it later would collide the same way.
	body="" remember_unreserved
	give_up "the service refused the report (HTTP 409): $(detail); if Slurm's job ids started again, set a new JOULECAST_SOURCE (e.g. ${source_name}-2) so that new jobs do not collide with stored runs"
	;;
000)
	unavailable "no answer from $JOULECAST_URL: $(head -c 300 "$tmp/err")"
	;;
5*)
	unavailable "the service answered HTTP $code: $(detail)"
	;;
*)
	# 400/401/403/422...: the service answers but will not record the job (a
	# bad token, a setup the service refuses). Failing open is only for an
	# unreachable service: the job is held back until the setup is fixed.
	log err "the service refused the report (HTTP $code): $(detail); failing the prolog (Slurm requeues or cancels the job): fix the setup"
	exit 1
	;;
esac
