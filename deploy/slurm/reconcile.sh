#!/bin/bash
# shellcheck disable=SC2016  # $names in single quotes are jq variables, not shell ones
# Joulecast reconciliation (example): releases the power reservations of
# jobs that the service still holds as running but that Slurm no longer
# runs, with DELETE /v1/jobs/{source}/{job_id}.
#
# The epilog (epilog_slurmctld.sh) releases a job when it ends. It can miss:
#   * slurmctld kills a job's running EpilogSlurmctld when it requeues the
#     job (its scripts are flushed), which happens when the node fails
#     while the job is being launched;
#   * the service was unreachable when the epilog ran;
#   * slurmctld stopped or failed over while the epilog ran.
# Without this script such a job keeps its reservation until it expires
# (its time limit plus the service's grace period).
#
# Run it (as SlurmUser or root, on a host where squeue works):
#   * from a node-down trigger, for a prompt release when a node fails:
#       sudo -u slurm strigger --set --node --down --flags=perm \
#         --program=/usr/local/libexec/joulecast/reconcile.sh
#   * every few minutes, for the other cases: joulecast-reconcile.timer.
#
# The rule: a job the service holds for this source is released when Slurm
# shows it PENDING or held (requeued), in a final state, or not at all
# (purged after MinJobAge). Any other state (CONFIGURING, RUNNING, COMPLETING,
# SUSPENDED, REQUEUED while completing, ...) keeps it: the epilog, or the
# next run, deals with it. Nothing is released unless squeue answered, can
# see every user's jobs (root, SlurmUser, or PrivateData without "jobs"),
# runs without the SQUEUE_* settings that filter it, and listed some job. The source must be this cluster's alone: a job of this source
# that Slurm does not know is released.
#
# A requeued job cannot start again between this script's squeue and its
# DELETE (well under a second): Slurm holds requeued jobs back (BeginTime).
#
# It also records the jobs that the prolog let run unreserved because the
# service could not be reached (kept in JOULECAST_SPOOL_DIR with the report
# that could not be sent) and that Slurm still runs: POST /v1/jobs with
# "force": true and the job's own start. Without that, once the service is
# back, those jobs draw power that no cap counts until they end.
#
#   reconcile.sh [--dry-run] [--allow-empty-queue] [node...]
#     --dry-run            say what would be released, release nothing
#     --allow-empty-queue  release even when squeue lists no job at all
#                          (refused otherwise: an empty queue while jobs are
#                          held is more likely a squeue that saw nothing)
#     node...              ignored (strigger passes the nodes that went down)
#
# Exit status: 0 when every release was done (or none was needed); 1 when
# the service or squeue could not be asked or a release failed, so that
# the timer's unit shows failed. Settings: the defaults below, overridden by
# /etc/slurm/joulecast-slurm.conf (shell syntax; or the file
# JOULECAST_SLURM_CONF names), then by JOULECAST_* in the environment. Needs bash, squeue,
# scontrol, curl and jq.

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
# A `schedule` token (it may list and release jobs), as the prolog's.
JOULECAST_TOKEN_FILE="/etc/slurm/joulecast.token"
JOULECAST_TIMEOUT_S=10
# Jobs read per request from GET /v1/jobs (1 to 1000); the pages are followed.
JOULECAST_PAGE_SIZE=1000
# The jobs' system in Joulecast; empty: ClusterName from `scontrol show config`.
JOULECAST_SOURCE=""
# Where the prolog keeps the jobs it let run unreserved (as the prolog's).
JOULECAST_SPOOL_DIR=/var/spool/joulecast-slurm
JOULECAST_SQUEUE=squeue
JOULECAST_SCONTROL=scontrol
JOULECAST_CURL=curl
JOULECAST_JQ=jq

conf=${JOULECAST_SLURM_CONF:-/etc/slurm/joulecast-slurm.conf}
if [[ -r $conf ]]; then
	# shellcheck source=/dev/null
	. "$conf"
fi
eval "$from_environment"

dry_run=false allow_empty=false
usage="usage: $0 [--dry-run] [--allow-empty-queue]"
for arg in "$@"; do
	case $arg in
	--dry-run) dry_run=true ;;
	--allow-empty-queue) allow_empty=true ;;
	-h | --help)
		echo "$usage"
		exit 0
		;;
	-*)
		echo "$usage" >&2
		exit 2
		;;
	*) ;; # strigger passes the nodes that went down: every job is looked at anyway
	esac
done

log() { # priority message...
	local priority=$1 msg
	shift
	msg=${*//[[:cntrl:]]/ }
	logger -t joulecast-reconcile -p "daemon.$priority" -- "$msg" 2>/dev/null || true
	printf 'joulecast-reconcile: %s: %s\n' "$priority" "$msg" >&2
}

die() {
	log err "$*; nothing released or recorded"
	exit 1
}

for tool in "$JOULECAST_SQUEUE" "$JOULECAST_SCONTROL" "$JOULECAST_CURL" "$JOULECAST_JQ"; do
	command -v "$tool" >/dev/null || die "$tool not found"
done

token=""
if [[ -r $JOULECAST_TOKEN_FILE ]]; then
	read -r token <"$JOULECAST_TOKEN_FILE" || true
fi
[[ $token =~ ^[A-Za-z0-9._~+/=-]+$ ]] || die "no valid token in $JOULECAST_TOKEN_FILE"

config=$("$JOULECAST_SCONTROL" show config 2>&1) || die "scontrol show config failed: ${config:0:300}"
setting() { awk -F' *= *' -v key="$1" '$1 == key { print $2; exit }' <<<"$config"; }

if ! [[ $JOULECAST_PAGE_SIZE =~ ^[1-9][0-9]{0,3}$ ]] || ((JOULECAST_PAGE_SIZE > 1000)); then
	die "JOULECAST_PAGE_SIZE must be 1 to 1000"
fi

source_name=${JOULECAST_SOURCE:-$(setting ClusterName)}
[[ -n $source_name ]] || die "set JOULECAST_SOURCE (ClusterName could not be read)"

# squeue must see every job, or the jobs of others would look gone.
me=$(id -un)
slurm_user=$(setting SlurmUser)
slurm_user=${slurm_user%%(*}
if [[ $me != root && $me != "$slurm_user" && $(setting PrivateData) == *jobs* ]]; then
	die "PrivateData hides other users' jobs from $me: run as root or SlurmUser ($slurm_user)"
fi

tmp=$(mktemp -d) || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT

request() { # method path [body]: the HTTP status (000 when unanswered); body in $tmp/answer
	local code data=()
	[[ -z ${3:-} ]] || data=(-H 'Content-Type: application/json' --data-binary "$3")
	code=$("$JOULECAST_CURL" --disable -sS --proto =http,https \
		--max-time "$JOULECAST_TIMEOUT_S" --connect-timeout 2 \
		--config <(printf 'header = "Authorization: Bearer %s"\n' "$token") \
		-H 'Accept: application/json' -X "$1" "${data[@]}" \
		-o "$tmp/answer" -w '%{http_code}' \
		"$JOULECAST_URL$2" 2>"$tmp/err") || true
	[[ $code =~ ^[0-9]{3}$ ]] || code=000
	printf '%s' "$code"
}

# 1. What the service holds as running, for this source (read first: a job
# recorded after this is not looked at), page by page.
ids=""
path="/v1/jobs?source=$("$JOULECAST_JQ" -rn --arg s "$source_name" '$s | @uri')&limit=$JOULECAST_PAGE_SIZE"
cursor=""
while :; do
	code=$(request GET "$path${cursor:+&cursor=$cursor}")
	[[ $code == 200 ]] || die "GET /v1/jobs answered HTTP $code: $(head -c 300 "$tmp/err" "$tmp/answer" 2>/dev/null)"
	page=$("$JOULECAST_JQ" -r --arg s "$source_name" \
		'.items[] | select(.source == $s) | .job_id' "$tmp/answer") ||
		die "could not read the service's jobs"
	ids+=${page:+$page$'\n'}
	cursor=$("$JOULECAST_JQ" -r '.next_cursor // empty | @uri' "$tmp/answer") ||
		die "could not read the service's jobs"
	[[ -n $cursor ]] || break
done
ids=${ids%$'\n'}
held=()
[[ -z $ids ]] || mapfile -t held <<<"$ids"
# The jobs the prolog let run unreserved, with their reports: read under
# the prolog's lock, so that none is missed while a prolog moves them.
# Only as the spool's owner (SlurmUser, as the prolog): files root made
# there would lock the prolog out of them.
spooled=""
if [[ -d $JOULECAST_SPOOL_DIR && ! ( -O $JOULECAST_SPOOL_DIR && -w $JOULECAST_SPOOL_DIR ) ]]; then
	log warning "$JOULECAST_SPOOL_DIR is not this user's ($me) to write: the jobs that ran unreserved are not recorded (run as SlurmUser; under systemd, ReadWritePaths=)"
elif [[ -d $JOULECAST_SPOOL_DIR ]] && exec 7>>"$JOULECAST_SPOOL_DIR/lock"; then
	if flock -w 10 7; then
		spooled=$(cat "$JOULECAST_SPOOL_DIR/to-register" "$JOULECAST_SPOOL_DIR/unreserved" 2>/dev/null |
			awk 'NF >= 3')
	else
		log warning "$JOULECAST_SPOOL_DIR is locked: the jobs that ran unreserved are looked at next time"
	fi
fi
if ((${#held[@]} == 0)) && [[ -z $spooled ]]; then
	log debug "no job of $source_name is held as running"
	exit 0
fi

# 2. What Slurm knows, by the ids the prolog reports: array tasks as
# ARRAYID_TASKID, every other job (heterogeneous components included) by
# its own job id.
# Settings in the environment that would make squeue list some jobs only.
unset "${!SQUEUE_@}" SLURM_CLUSTERS
listing=$("$JOULECAST_SQUEUE" --noheader --all --array --states=all \
	--format='%A|%F|%K|%T' 2>"$tmp/squeue.err") ||
	die "squeue failed: $(head -c 300 "$tmp/squeue.err")"
if [[ -z $listing ]] && ((${#held[@]} > 0)) && ! $allow_empty; then
	die "squeue lists no job at all while ${#held[@]} are held; if the cluster is really idle, run with --allow-empty-queue"
fi
declare -A state
while IFS='|' read -r id array_id task_id job_state; do
	[[ -n $id ]] || continue
	if [[ $task_id =~ ^[0-9]+$ ]]; then
		id="${array_id}_${task_id}"
	fi
	state[$id]=$job_state
done <<<"$listing"

# Whether Slurm shows a job pending or held (requeued), in a final state, or
# not at all: it does not run, and will not without a new prolog.
not_running() {
	case $1 in
	PENDING | REQUEUE_HOLD | RESV_DEL_HOLD | COMPLETED | CANCELLED | FAILED | TIMEOUT | NODE_FAIL | \
		PREEMPTED | BOOT_FAIL | DEADLINE | OUT_OF_MEMORY | SPECIAL_EXIT | REVOKED | UNKNOWN) return 0 ;;
	*) return 1 ;;
	esac
}

# 3. Release those Slurm does not run.
released=() failed=() kept=0
for job_id in "${held[@]}"; do
	slurm_state=${state[$job_id]:-UNKNOWN}
	if ! not_running "$slurm_state"; then
		kept=$((kept + 1))
		continue
	fi
	if $dry_run; then
		log info "job $job_id ($slurm_state in Slurm): would be released"
		released+=("$job_id")
		continue
	fi
	path=$("$JOULECAST_JQ" -rn --arg s "$source_name" --arg j "$job_id" \
		'"/v1/jobs/\($s | @uri)/\($j | @uri)"')
	code=$(request DELETE "$path")
	case $code in
	204)
		log info "job $job_id ($slurm_state in Slurm): power reservation released"
		released+=("$job_id")
		;;
	404) ;; # its epilog was quicker
	*)
		log err "job $job_id ($slurm_state in Slurm): release answered HTTP $code:" \
			"$("$JOULECAST_JQ" -r '.detail // empty' "$tmp/answer" 2>/dev/null | head -c 300)$(head -c 300 "$tmp/err")"
		failed+=("$job_id")
		;;
	esac
done

# 4. Record the jobs that ran unreserved and that Slurm runs (or is
# starting). Those that may still run (suspended, ...) and those to try
# again (no answer, busy) stay in `to-register`; the others (recorded,
# ended, pending again, unknown to Slurm, refused) leave it. Nothing is
# decided from an empty listing (a squeue that saw nothing).
declare -A is_held done_ids
for job_id in "${held[@]}"; do
	is_held[$job_id]=1
done
recorded=()
: >"$tmp/to-register"
keep() { printf '%s %s %s\n' "$job_id" 0 "$report" >>"$tmp/to-register"; }
record() { # body: the HTTP status
	request POST /v1/jobs "$1"
}
while [[ -n $listing ]] && read -r job_id _ report; do
	[[ -n $report && -z ${done_ids[$job_id]:-} ]] || continue
	done_ids[$job_id]=1
	[[ -z ${is_held[$job_id]:-} ]] || continue
	slurm_state=${state[$job_id]:-UNKNOWN}
	not_running "$slurm_state" && continue
	if [[ $slurm_state != RUNNING && $slurm_state != CONFIGURING ]]; then
		keep # suspended, ...: it may run again
		continue
	fi
	if $dry_run; then
		log info "job $job_id ($slurm_state in Slurm, unreserved): would be recorded"
		recorded+=("$job_id")
		continue
	fi
	body=$(printf '%s' "$report" | "$JOULECAST_JQ" -c '.force = true' 2>/dev/null) || {
		log err "job $job_id: its kept report is not JSON; dropped"
		continue
	}
	code=$(record "$body")
	# Nodes missing from the service's registry: by node count instead, as
	# the prolog does.
	if [[ $code == 422 ]] && "$JOULECAST_JQ" -e '[.errors[]?.field] == ["node_list"]' "$tmp/answer" >/dev/null 2>&1; then
		code=$(record "$(printf '%s' "$body" | "$JOULECAST_JQ" -c 'del(.node_list)')")
	fi
	case $code in
	200 | 201)
		log info "job $job_id ($slurm_state in Slurm): ran unreserved; recorded now, its power counts under the caps"
		recorded+=("$job_id")
		;;
	000 | 429 | 5*)
		log warning "job $job_id: recording it answered HTTP $code; tried again next time"
		keep
		failed+=("$job_id")
		;;
	*)
		log err "job $job_id: recording it answered HTTP $code:" \
			"$("$JOULECAST_JQ" -r '.detail // empty' "$tmp/answer" 2>/dev/null | head -c 300); dropped"
		;;
	esac
done <<<"$spooled"
if [[ -n $spooled && -n $listing ]] && ! $dry_run; then
	# Rewritten in place: the file stays the spool owner's.
	cat "$tmp/to-register" >"$JOULECAST_SPOOL_DIR/to-register"
fi

verb=released
$dry_run && verb="would release"
log info "$source_name: ${#held[@]} job(s) held as running; $kept running in Slurm;" \
	"$verb ${#released[@]}${released[*]:+: ${released[*]}}${failed[*]:+; failed: ${failed[*]}}${recorded[*]:+; ran unreserved, recorded: ${recorded[*]}}"
((${#failed[@]} == 0))
